"""Fault actions: Chaos Toolkit activities that inject faults through agents."""
