"""Verifier probes: Chaos Toolkit probes that measure, never inject."""
