"""The embedded lab: a miniature GPU inference cluster on one machine, with no GPU.

``up``, ``status`` and ``down`` run it (docs/lab.md); the engine reaches a running lab
only through ``DIR/lab.json``, its agents, Prometheus, HTTP and the placement endpoint.
"""

from gameday.lab.api import default_lab_dir, down, status, up

__all__ = ["default_lab_dir", "down", "status", "up"]
