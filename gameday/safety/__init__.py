"""What keeps a run inside its bounds: signals that roll back, target locks, safeguards, target
configuration, Alertmanager silences, cleanup."""
