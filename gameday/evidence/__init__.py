"""Evidence of a run: the fault ledger, journals, signatures, audit and redaction."""
