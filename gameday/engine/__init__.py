"""Running one experiment: the runner, its session, fan-out, leases, signals, timeouts, verdicts."""
