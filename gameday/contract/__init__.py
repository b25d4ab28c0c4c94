"""What the orchestrator, the agents and the lab agree on, free of either side's code.

The fault backend seam (:mod:`gameday.contract.backend`: a fault request, the backend
Protocol, the injection layers) and the fault filesystem's vocabulary
(:mod:`gameday.contract.faultfs`: its operations and error numbers). The fault
kinds (:mod:`gameday.kinds`) validate against these; agents and their backends implement
them.
"""
