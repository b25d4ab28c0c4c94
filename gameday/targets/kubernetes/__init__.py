"""``--target kubernetes``: agents on real GPU clusters (docs/kubernetes.md).

- :mod:`gameday.targets.kubernetes.config`: settings and the official client (kubeconfig,
  in-cluster);
- :mod:`gameday.targets.kubernetes.discovery`: agent pods, nodes, shard pods, GPU inventories;
- :mod:`gameday.targets.kubernetes.selectors`: GPU selectors over the fleet (labels, UUID, index,
  NVLink domain, shard, percent);
- :mod:`gameday.targets.kubernetes.marks` and :mod:`gameday.targets.kubernetes.nodes`: node
  changes with revert marks;
- :mod:`gameday.targets.kubernetes.target`: the Target, and the route that renews and reverts
  Kubernetes-level faults;
- :mod:`gameday.targets.kubernetes.manifests`: validation of ``deploy/kubernetes/`` against the
  client's
  models.

The ``kubernetes`` package is imported only when a function needs it.
"""
