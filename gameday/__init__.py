"""gameday: chaos engineering and resilience testing for GPU / AI infrastructure."""

__version__ = "0.1.0"
