"""The keys an experiment may have at every level, and "did you mean" for the others.

The Chaos Toolkit ignores keys it does not know, so a misspelt ``steady_state_hypothesis:``
silently drops the hypothesis; gameday refuses every unknown key of the experiment and of
its ``gameday`` extension, naming the closest known one (:func:`did_you_mean`).
"""

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from gameday.errors import InvalidInput

__all__ = ["did_you_mean", "unknown_key", "unknown_keys"]

TOP = ("version", "title", "description", "tags", "contributions", "configuration", "secrets",
       "extensions", "controls", "steady-state-hypothesis", "method", "rollbacks", "runtime",
       "dry")
HYPOTHESIS = ("title", "probes", "controls", "extensions")
ACTIVITY = ("type", "name", "provider", "tolerance", "pauses", "background", "controls", "ref",
            "timeout", "configuration", "secrets", "extensions", "dry")
PAUSES = ("before", "after")
PROVIDERS: Mapping[str, tuple[str, ...]] = {
    "python": ("type", "module", "func", "arguments", "secrets"),
    "http": ("type", "url", "method", "headers", "expected_status", "arguments", "timeout",
             "verify_tls", "max_retries", "secrets"),
    "process": ("type", "path", "arguments", "timeout", "secrets"),
}
GAMEDAY = ("name", "target", "coverage", "blast_radius", "slo", "lease_s", "safeguards",
           "silence", "stop_on")
COVERAGE = ("fault", "layer")
BLAST_RADIUS = ("max_gpus", "max_nodes", "max_percent")
SLO = ("rto_s", "rpo_steps")
SAFEGUARD = ("name", "promql", "http", "json", "max", "min", "equals", "interval_s", "failures")


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known key, else ``""``."""
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(key: str, known: Iterable[str], path: str) -> InvalidInput:
    """The error for an unknown ``key`` at ``path``: the closest known key, then all."""
    options = sorted(known)
    return InvalidInput(f"unknown key{did_you_mean(key, options)} (known: {', '.join(options)})",
                        path=path)


def _check(mapping: Any, known: tuple[str, ...], base: str, found: list[InvalidInput]) -> None:
    if not isinstance(mapping, Mapping):
        return
    for key in mapping:
        if key not in known:
            found.append(unknown_key(str(key), known, f"{base}.{key}" if base else str(key)))


def _activity(activity: Any, where: str, found: list[InvalidInput]) -> None:
    if not isinstance(activity, Mapping):
        return
    _check(activity, ACTIVITY, where, found)
    _check(activity.get("pauses"), PAUSES, f"{where}.pauses", found)
    provider = activity.get("provider")
    if isinstance(provider, Mapping) and isinstance(provider.get("type"), str) \
            and provider["type"] in PROVIDERS:
        _check(provider, PROVIDERS[str(provider["type"])], f"{where}.provider", found)


def unknown_keys(document: Mapping[str, Any]) -> list[InvalidInput]:
    """Every unknown key of the experiment and of its ``gameday`` extension."""
    found: list[InvalidInput] = []
    _check(document, TOP, "", found)
    hypothesis = document.get("steady-state-hypothesis")
    _check(hypothesis, HYPOTHESIS, "steady-state-hypothesis", found)
    if isinstance(hypothesis, Mapping) and isinstance(hypothesis.get("probes"), list):
        for position, probe in enumerate(hypothesis["probes"]):
            _activity(probe, f"steady-state-hypothesis.probes[{position}]", found)
    for section in ("method", "rollbacks"):
        if isinstance(document.get(section), list):
            for position, activity in enumerate(document[section]):
                _activity(activity, f"{section}[{position}]", found)
    extensions = document.get("extensions")
    for position, raw in enumerate(extensions if isinstance(extensions, list) else []):
        if not isinstance(raw, Mapping) or raw.get("name") != "gameday":
            continue
        base = f"extensions[{position}]"
        _check(raw, GAMEDAY, base, found)
        _check(raw.get("coverage"), COVERAGE, f"{base}.coverage", found)
        _check(raw.get("blast_radius"), BLAST_RADIUS, f"{base}.blast_radius", found)
        _check(raw.get("slo"), SLO, f"{base}.slo", found)
        if isinstance(raw.get("safeguards"), list):
            for index, guard in enumerate(raw["safeguards"]):
                _check(guard, SAFEGUARD, f"{base}.safeguards[{index}]", found)
    return found
