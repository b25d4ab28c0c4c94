"""The Kubernetes API as both sides use it: API settings and clients (config), the revert
marks a Kubernetes-level fault leaves on its node (marks) and the node edits that apply
and undo them (nodes). The orchestrator's Kubernetes target writes the marks; every
agent's reconciler undoes the expired ones, so both stand on this package.
"""
