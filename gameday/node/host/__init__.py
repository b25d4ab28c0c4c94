"""Real backends: what the agent drives on a real host (``--backend host``)."""
