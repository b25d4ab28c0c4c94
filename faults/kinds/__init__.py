"""Fault kinds by area; ``faults.catalogue`` gathers them."""
