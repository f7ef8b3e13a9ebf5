"""Importers: real topology sources -> placer's cluster model (``placer cluster import``).

One module per format, each a pure ``parse_*(text, source)`` that returns plain dataclasses and raises
:class:`placer.model.errors.InputError` (file, line, what was expected) on input it cannot read:

================  =====================================================================
``topo_matrix``   ``nvidia-smi topo -m``: GPU/NIC link matrix, CPU and NUMA affinity
``nccl_xml``      NCCL topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``)
``k8s_nodes``     ``kubectl get nodes -o json``: inventory and topology labels (presets)
``k8s_pods``      ``kubectl get pods -A -o json``: busy GPUs, requested CPU and memory
``nccl_tests``    nccl-tests output: bus bandwidth per message size
``slurm``         Slurm ``topology.conf`` (tree, block) and ``topology.yaml``
``aws_topology``  ``aws ec2 describe-instance-topology`` output
================  =====================================================================

``hardware`` is what the two per-node hardware formats share, ``gpus`` the NVLink-by-generation table,
``merge`` joins the sources into one validated ``kind: Cluster`` document and ``summary`` renders the
report. Content a parser recognises but cannot use, or does not recognise, becomes a
:class:`~placer.importers.common.Note`, never a silent drop.
"""
