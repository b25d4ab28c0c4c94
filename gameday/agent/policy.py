"""The agent's own default-deny policy (``gameday agent serve --policy FILE``).

A policy file (YAML or JSON) says what this agent may do, whatever a caller asks::

    kinds: [process.pause, storage.stall, net.loss]   # nothing else
    paths: [/data/checkpoints]          # storage targets: at or under these (realpath)
    processes:                          # process targets: one of these must match
      names: [trainer]
      cmdline: ["python -m train"]      # RE2, searched in the command line
      cgroups: [/kubepods/burstable]    # a prefix of one of the process's cgroup paths
    interfaces: [eth1]                  # "*": any but the default-route interface,
                                        # which is allowed only when named
    gpu_device_settings: false          # real clock / power locks (allow_device_settings)
    lease_max_s: 600
    lifetime_max_s: 3600                # across renewals
    max_active: 32
    max_processes: 4

Whatever the file says, some things are never allowed: paths under ``/proc``, ``/sys``,
``/dev``, ``/`` itself, and the agent's state, token, audit and program directories;
the fixed process denylist of :func:`gameday.node.processes.refusal` (which the host
backend asks before every signal). On the host backend an agent with no policy refuses
every target (:data:`NO_POLICY`). :func:`load_policy` refuses unknown keys.
"""

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from gameday.agent.registry import Limits, PolicyRefused
from gameday.contract.backend import FaultRequest
from gameday.errors import InvalidInput
from gameday.kinds import catalogue as kind_specs
from gameday.kinds.gpu import ThermalParams
from gameday.kinds.process import KillParams, PauseParams
from gameday.node.processes import MAX_PROCESSES, command_line, compile_cmdline, process_ref

__all__ = ["NO_POLICY", "Policy", "default_route_interfaces", "load_policy"]

#: The one line a host agent without a policy answers every fault with.
NO_POLICY: Final = ("this agent has no policy, so it refuses every target: write one "
                    "(docs/agent-api.md, 'Policy') and start it with --policy FILE")

_KEYS: Final = frozenset({"kinds", "paths", "processes", "interfaces", "gpu_device_settings",
                          "lease_max_s", "lifetime_max_s", "max_active", "max_processes"})
_PROCESS_KEYS: Final = frozenset({"names", "cmdline", "cgroups"})
_NEVER_PATHS: Final = ("/proc", "/sys", "/dev", "/run/gameday")


def default_route_interfaces() -> frozenset[str]:
    """The interfaces that carry a default route (IPv4, ``/proc/net/route``)."""
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return frozenset()
    return frozenset(parts[0] for parts in (line.split() for line in lines)
                     if len(parts) > 2 and parts[1] == "00000000")


def _own_dirs() -> list[str]:
    """Directories of the agent itself: its interpreter, its installed code."""
    here = Path(__file__).resolve().parent.parent
    return sorted({os.path.realpath(sys.prefix), os.path.realpath(os.path.dirname(
        sys.executable)), str(here)})


@dataclass(frozen=True)
class Policy:
    """What this agent may do (see the module doc); ``protected`` are directories never
    faulted (the agent's state, token and audit directories), on top of the fixed ones."""

    kinds: frozenset[str] = frozenset()
    paths: tuple[str, ...] = ()
    process_names: frozenset[str] = frozenset()
    process_cmdline: tuple[str, ...] = ()
    process_cgroups: tuple[str, ...] = ()
    interfaces: frozenset[str] = frozenset()
    gpu_device_settings: bool = False
    lease_max_s: float = 600.0
    lifetime_max_s: float = 3600.0
    max_active: int = 32
    max_processes: int = 4
    source: str = "the agent's policy"
    protected: tuple[str, ...] = field(default=())

    def limits(self) -> Limits:
        """The caps the registry enforces for this policy."""
        return Limits(kinds=self.kinds, lease_max_s=self.lease_max_s,
                      lifetime_max_s=self.lifetime_max_s, max_active=self.max_active,
                      source=self.source)

    def protecting(self, directories: Iterable[Path]) -> "Policy":
        """This policy, also never faulting ``directories`` (and what is below them)."""
        extra = tuple(os.path.realpath(d) for d in directories)
        return Policy(**{**self.__dict__, "protected": self.protected + extra})

    # -- checks ---------------------------------------------------------------------

    def check(self, request: FaultRequest) -> None:
        """:class:`PolicyRefused` (one line) unless the policy allows ``request``'s kind,
        its path, interface and device settings (its parameters as the kind's
        declaration parses them: :class:`~gameday.errors.FaultRejected` if it refuses)."""
        if request.kind not in self.kinds:
            raise PolicyRefused(f"{request.kind} is not allowed by {self.source}")
        target = request.target
        for key in ("path", "mount"):
            if key in target:
                self.check_path(target[key], f"target.{key}")
        if "link" in target:
            self.check_interface(target["link"], netns=target.get("netns"))
        elif request.kind.startswith("net.") and "netns" not in target \
                and "*" not in self.interfaces:
            raise PolicyRefused(f"{request.kind} without target.link touches every "
                                f"interface; {self.source} allows only named ones")
        spec = kind_specs.lookup(request.kind)
        params = spec.backend_params(request.params) if spec is not None else None
        if isinstance(params, ThermalParams) and params.allow_device_settings \
                and not self.gpu_device_settings:
            raise PolicyRefused(f"real GPU clock and power locks are not allowed by "
                                f"{self.source} (gpu_device_settings)")
        if isinstance(params, KillParams | PauseParams) and \
                params.max_processes > self.max_processes:
            raise PolicyRefused(f"params.max_processes {params.max_processes} is over "
                                f"{self.max_processes}, the most {self.source} allows")

    def check_path(self, value: object, field_name: str = "target.path") -> str:
        """The real path of ``value`` if the policy allows faulting it."""
        if not isinstance(value, str) or not value.startswith("/"):
            raise PolicyRefused(f"{field_name} must be an absolute path")
        real = os.path.realpath(value)
        never = [*_NEVER_PATHS, *_own_dirs(), *self.protected]
        if real == "/" or any(_under(real, d) or _under(d, real) for d in never):
            raise PolicyRefused(f"{field_name} {value} ({real}) is, holds or is under a "
                                f"directory the agent never faults")
        if not any(_under(real, allowed) for allowed in self.paths):
            raise PolicyRefused(f"{field_name} {real} is not under a path {self.source} "
                                f"allows ({', '.join(self.paths) or 'none'})")
        return real

    def check_interface(self, link: object, *, netns: object = None) -> None:
        if not isinstance(link, str):
            raise PolicyRefused("target.link must be an interface name")
        if link in self.interfaces:
            return
        if "*" in self.interfaces and (netns is not None
                                       or link not in default_route_interfaces()):
            return
        raise PolicyRefused(f"interface {link} is not allowed by {self.source}"
                            + (" (the default-route interface must be named)"
                               if "*" in self.interfaces else ""))

    def process_guard(self, pid: int) -> str | None:
        """Why the policy does not allow signalling ``pid`` (None: it does): it must
        match an allowed name, command-line pattern or cgroup."""
        ref = process_ref(pid)
        if ref is None:
            return None
        argv = command_line(pid)
        if ref.name in self.process_names or (argv and Path(argv[0]).name
                                              in self.process_names):
            return None
        line = " ".join(argv)
        if any(compile_cmdline(p).search(line) for p in self.process_cmdline):
            return None
        if self.process_cgroups:
            try:
                groups = [row.split(":", 2)[2] for row in
                          Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
            except (OSError, IndexError):
                groups = []
            if any(g.startswith(prefix) for g in groups for prefix in self.process_cgroups):
                return None
        return f"pid {pid} ({ref.name}) is not a process {self.source} allows"


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"{where} must be a list of non-empty strings")
    return list(value)


def _number(data: Mapping[str, Any], key: str, default: float, where: str,
            *, integer: bool = False) -> Any:
    value: Any = data.get(key, default)
    number = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not number or not value > 0:
        raise InvalidInput(f"{where}: {key} must be a positive "
                           f"{'integer' if integer else 'number'}, got {value!r}")
    return value


def load_policy(path: Path) -> Policy:
    """The policy in ``path``; :class:`InvalidInput` (one line, naming the file and the
    key) for anything it cannot take."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except OSError as exc:
        raise InvalidInput(f"--policy {where}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidInput(f"--policy {where}: not valid YAML/JSON "
                           f"({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"--policy {where}: must be a mapping of {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise InvalidInput(f"--policy {where}: unknown key {unknown[0]!r} "
                           f"(known: {', '.join(sorted(_KEYS))})")
    processes = data.get("processes") or {}
    if not isinstance(processes, dict) or set(processes) - _PROCESS_KEYS:
        raise InvalidInput(f"--policy {where}: processes takes only names, cmdline, cgroups")
    paths = _strings(data.get("paths", []), f"{where}: paths")
    for item in paths:
        if not item.startswith("/") or ".." in item.split("/"):
            raise InvalidInput(f"--policy {where}: paths entry {item!r} must be absolute, "
                               f"without '..'")
    cmdline = _strings(processes.get("cmdline", []), f"{where}: processes.cmdline")
    for pattern in cmdline:
        try:
            compile_cmdline(pattern)
        except Exception as exc:
            raise InvalidInput(f"--policy {where}: processes.cmdline {pattern!r}: {exc}"
                               ) from None
    gpu = data.get("gpu_device_settings", False)
    if not isinstance(gpu, bool):
        raise InvalidInput(f"--policy {where}: gpu_device_settings must be true or false")
    policy = Policy(
        kinds=frozenset(_strings(data.get("kinds", []), f"{where}: kinds")),
        paths=tuple(os.path.realpath(p) for p in paths),
        process_names=frozenset(_strings(processes.get("names", []),
                                         f"{where}: processes.names")),
        process_cmdline=tuple(cmdline),
        process_cgroups=tuple(_strings(processes.get("cgroups", []),
                                       f"{where}: processes.cgroups")),
        interfaces=frozenset(_strings(data.get("interfaces", []), f"{where}: interfaces")),
        gpu_device_settings=gpu,
        lease_max_s=_number(data, "lease_max_s", 600.0, where),
        lifetime_max_s=_number(data, "lifetime_max_s", 3600.0, where),
        max_active=_number(data, "max_active", 32, where, integer=True),
        max_processes=_number(data, "max_processes", 4, where, integer=True),
        source=f"policy {where}")
    if policy.max_processes > MAX_PROCESSES:
        raise InvalidInput(f"--policy {where}: max_processes is at most {MAX_PROCESSES}")
    return policy
