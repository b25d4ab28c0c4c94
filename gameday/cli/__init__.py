"""The ``gameday`` command line: parsing, dispatch, and printing what the engines return."""
