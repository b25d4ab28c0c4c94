"""A process selector's shape, checked the same way by ``validate``, ``plan`` and ``run``.

:func:`check_process_selector` is every rule of a ``process`` selector that needs no
target (which keys go together, a pid > 1, non-empty names and patterns, the
``env``/``parent``/``cgroup`` filters' shapes, a ``pick``); ``gameday validate`` runs it
on each process fault's selector, and ``faults.process`` runs it before it resolves
one, so the two cannot disagree on a selector. A value still holding a ``${variable}``
(validate without its ``--var``) is left to the run, which substitutes it first.
"""

from collections.abc import Mapping
from typing import Any

from gameday.contract.pick import PICK_KEYS, Pick, parse_pick
from gameday.errors import InvalidInput
from gameday.kinds.process import PROCESS_SELECTOR

__all__ = ["FILTERS", "KEYS", "check_process_selector", "selector_pick"]

KEYS = PROCESS_SELECTOR.key_names
#: Host selectors that narrow name/cmdline, or stand alone.
FILTERS = ("env", "parent", "cgroup")
_ONE_OF = ("shard", "role", "pid", "name", "cmdline")


def _unresolved(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def selector_pick(chosen: Mapping[str, Any], where: str = "process") -> Pick | None:
    """The selector's seeded ``pick``, None without one; :class:`InvalidInput` naming
    ``process.pick[.KEY]`` when it is malformed or picks from a single process."""
    if "pick" not in chosen:
        return None
    single = [key for key in ("shard", "role", "pid") if key in chosen]
    if single:
        raise InvalidInput(f"{single[0]} names one process; pick takes some of the matches "
                           "of a name, cmdline, env, parent, cgroup or pod",
                           path=f"{where}.pick")
    try:
        return parse_pick(chosen["pick"])
    except ValueError as exc:
        key, sep, rest = str(exc).partition(": ")
        if sep and key in PICK_KEYS:
            raise InvalidInput(rest, path=f"{where}.pick.{key}") from None
        raise InvalidInput(str(exc), path=f"{where}.pick") from None


def check_process_selector(selector: Any, where: str = "process") -> dict[str, Any]:
    """The selector as a mapping, or :class:`InvalidInput` (one line, its key path) for
    the first rule it breaks."""
    if selector is None:
        selector = {}
    if not isinstance(selector, Mapping):
        raise InvalidInput(f"must be a mapping ({', '.join(KEYS)}), got {selector!r}",
                           path=where)
    for key in selector:
        if key not in KEYS:
            raise InvalidInput(f"unknown key (known: {', '.join(KEYS)})",
                               path=f"{where}.{key}")
    chosen = dict(selector)
    if any(_unresolved(value) for value in chosen.values() if not isinstance(value, Mapping)):
        return chosen
    selector_pick(chosen, where)
    which = [key for key in _ONE_OF if key in chosen]
    filters = [key for key in FILTERS if key in chosen]
    if "pod" in chosen:  # (the container itself is resolved through the Kubernetes API)
        for key in ("node", "cgroup"):
            if key in chosen:
                raise InvalidInput("the pod says where and which cgroup; drop this key",
                                   path=f"{where}.{key}")
        if which or filters:
            _check_filters(chosen, which, where)
        return chosen
    if filters:
        _check_filters(chosen, which, where)
        return chosen
    if len(which) != 1:
        raise InvalidInput("give exactly one of shard, role, pid, name, cmdline (or env, "
                           "parent, cgroup)", path=where)
    key = which[0]
    value = chosen[key]
    if key == "pid" and (not isinstance(value, int) or isinstance(value, bool) or value <= 1):
        raise InvalidInput(f"must be a pid > 1, got {value!r}", path=f"{where}.pid")
    if key in ("name", "cmdline") and (not isinstance(value, str) or not value):
        raise InvalidInput("must be a non-empty string", path=f"{where}.{key}")
    return chosen


def _check_filters(chosen: Mapping[str, Any], which: list[str], where: str) -> None:
    if set(which) - {"name", "cmdline"}:
        raise InvalidInput("env, parent and cgroup combine with name and cmdline only",
                           path=where)
    env = chosen.get("env")
    if env is not None and (not isinstance(env, dict) or not env or not all(
            isinstance(value, str | int) for value in env.values())):
        raise InvalidInput("must be a mapping VAR: VALUE, e.g. {RANK: '1'}", path=f"{where}.env")
    parent = chosen.get("parent")
    if parent is not None and (not isinstance(parent, dict) or len(
            set(parent) & {"pid", "name", "cmdline"}) != 1):
        raise InvalidInput("must be one of {pid: N}, {name: COMM}, {cmdline: REGEX}",
                           path=f"{where}.parent")
    if "cgroup" in chosen and (not isinstance(chosen["cgroup"], str) or
                               not chosen["cgroup"]):
        raise InvalidInput("must be a non-empty regular expression", path=f"{where}.cgroup")
