"""``--target kubernetes``: agents on real GPU clusters (docs/kubernetes.md).

- :mod:`gameday.k8s.config`: settings and the official client (kubeconfig, in-cluster);
- :mod:`gameday.k8s.discovery`: agent pods, nodes, shard pods, GPU inventories;
- :mod:`gameday.k8s.selectors`: GPU selectors over the fleet (labels, UUID, index,
  NVLink domain, shard, percent);
- :mod:`gameday.k8s.marks` and :mod:`gameday.k8s.nodes`: node changes with revert marks;
- :mod:`gameday.k8s.target`: the Target, and the route that renews and reverts
  Kubernetes-level faults;
- :mod:`gameday.k8s.manifests`: validation of ``deploy/kubernetes/`` against the client's
  models.

The ``kubernetes`` package is imported only when a function needs it.
"""
