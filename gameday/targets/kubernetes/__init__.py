"""``--target kubernetes``: agents on real GPU clusters (docs/kubernetes.md).

- :mod:`gameday.targets.kubernetes.discovery`: agent pods, nodes, shard pods, GPU inventories;
- :mod:`gameday.targets.kubernetes.selectors`: GPU selectors over the fleet (labels, UUID, index,
  NVLink domain, shard, percent);
- :mod:`gameday.targets.kubernetes.target`: the Target, and the route that renews and reverts
  Kubernetes-level faults;
- :mod:`gameday.targets.kubernetes.manifests`: validation of ``deploy/kubernetes/`` against the
  client's models.

API settings and clients, and the node changes with revert marks that the agents'
reconcilers undo too, are in :mod:`gameday.kube` (shared with the agent).

The ``kubernetes`` package is imported only when a function needs it.
"""
