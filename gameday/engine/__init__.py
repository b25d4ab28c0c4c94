"""Running one experiment: the runner, its session, fan-out, leases, timeouts, the judge."""
