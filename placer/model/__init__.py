"""The formats placer reads and writes: spec, cluster, placement and record models, levels, errors, loading.

Everything else in placer depends on this package; it depends on nothing of placer's.
"""

API_VERSION = "placer.dev/v1alpha1"  # the apiVersion of every document placer reads and writes
