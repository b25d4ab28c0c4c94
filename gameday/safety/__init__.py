"""What keeps a run inside its bounds: target locks, safeguards, target configuration, cleanup."""
