"""Model the cluster: the cluster document → resolved nodes, the domain tree and the link graph (``graph``),
the cost formulas every stage shares (``cost``), what a placement takes from the cluster (``usage``), and
the synthetic cluster generator (``generate``)."""
