"""Integrations that run inside a user's training job and expose its progress the way
gameday's RPO verifier reads it, so the user writes no callback of their own.

- :mod:`gameday.integrations.progress`: the plain hook (:class:`ProgressReporter`) for
  any script, torchrun's included; standard library only (``prometheus_client`` when
  the Prometheus gauges are asked for).
- :mod:`gameday.integrations.hf`: a ``transformers.TrainerCallback``.
- :mod:`gameday.integrations.lightning`: a Lightning ``Callback``.

Nothing here imports the rest of gameday, and a framework is imported only by its own
module, so a job pays only for what it uses.
"""
