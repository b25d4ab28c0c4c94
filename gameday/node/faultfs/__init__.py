"""The fault filesystem: a FUSE passthrough over a backing directory that can be made
slow, stalled or failing while it stays mounted.

It runs as its own process (``python -m gameday.node.faultfs --backing B --mountpoint M
--control SOCK``); faults are switched on and off through a small unix-socket channel
(:mod:`gameday.node.faultfs.control`) as :class:`~gameday.node.faultfs.rules.Rule` values. Both
the lab (its weight and checkpoint store) and the real host backend
(``gameday.node.host.fusefs``) use it; it imports neither.
"""
