"""Placement → output: Kubernetes manifests per ``--target`` (``targets/``), placement records, safe file
writes, and the read-back of what placer printed."""
