"""Game days: playbooks, play, gate, schedule, coverage, costs and fault mixes."""
