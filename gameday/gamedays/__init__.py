"""Game days: playbooks, play, gate, schedule, coverage, costs, fault mixes, and the validation
of every file a game day is made of (validate.py)."""
