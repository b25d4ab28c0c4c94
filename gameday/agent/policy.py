"""The agent's own default-deny policy (``gameday agent serve --policy FILE``).

A policy file (YAML or JSON) says what this agent may do, whatever a caller asks::

    kinds: [process.pause, storage.stall, net.loss]   # nothing else
    paths: [/data/checkpoints]          # storage targets: at or under these (realpath)
    processes:                          # process targets: one of these must match
      names: [trainer]
      cmdline: ["python -m train"]      # RE2, searched in the command line
      cgroups: [/kubepods/burstable]    # one of the process's cgroup paths is at or
                                        # under it (by path components: /P allows /P
                                        # and /P/x, never /PX)
    interfaces: [eth1]                  # "*": any but the default-route interface,
                                        # which is allowed only when named
    gpu_device_settings: false          # real clock / power locks (allow_device_settings)
    lease_max_s: 600
    lifetime_max_s: 3600                # across renewals
    max_active: 32
    max_processes: 4

Whatever the file says, some things are never allowed: paths under ``/proc``, ``/sys``,
``/dev``, ``/`` itself, and the agent's lifelines (:meth:`Policy.protecting`: every
directory it reads or writes at run time, its interpreter and its code); the fixed
process denylist of :func:`gameday.node.processes.refusal` (which the host backend asks
before every signal). On the host backend an agent with no policy refuses every target
(:data:`gameday.node.host.backend.NO_POLICY`). :func:`load_policy` refuses unknown keys.

Every check is made on the object a fault acts on, as the host's handlers resolve it:
a process by its thread group (:meth:`Policy.process_guard`), every process of a cgroup
and the cgroup itself (:meth:`Policy.check_cgroup_dir`), a network namespace and every
interface in it (:meth:`Policy.check`), a path by its real path. The same checks run for
an inject, each item of a batch and a ``faults:check`` preview.
"""

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from gameday.agent.registry import Limits
from gameday.contract.backend import FaultRequest
from gameday.errors import InvalidInput, PolicyRefused, first_line
from gameday.kinds import catalogue as kind_specs
from gameday.kinds.gpu import ThermalParams
from gameday.kinds.process import KillParams, PauseParams
from gameday.node.host.netns import route
from gameday.node.processes import MAX_PROCESSES, command_line, compile_cmdline, process_ref

__all__ = ["Policy", "default_route_interfaces", "load_policy", "namespace_interfaces"]

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
    """Directories of the agent itself: its interpreter (the virtual environment's and
    the base installation's), its installed code, and where the fault filesystem's
    helper (``fusermount3``) lives."""
    here = Path(__file__).resolve().parent.parent
    dirs = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
            os.path.dirname(os.path.realpath(sys.executable)),
            os.path.realpath(os.path.dirname(sys.executable)), str(here)}
    for helper in ("fusermount3", "fusermount"):
        found = shutil.which(helper)
        if found:
            dirs.add(os.path.dirname(os.path.realpath(found)))
    return sorted(dirs)


def _same_netns_as_host(netns: str) -> bool:
    """Whether ``/run/netns/NETNS`` is this agent's own network namespace bind-mounted
    under a name (then it is the host's, and host rules apply)."""
    try:
        named, own = os.stat(f"/run/netns/{netns}"), os.stat("/proc/self/ns/net")
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (own.st_dev, own.st_ino)


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

    def never(self) -> list[str]:
        """Every directory never faulted, nor anything above or below it: the fixed ones
        (``/proc``, ``/sys``, ``/dev``, ``/run/gameday``), the agent's interpreter and
        code, and :attr:`protected`."""
        return [*_NEVER_PATHS, *_own_dirs(), *self.protected]

    def lifelines_allowed(self) -> list[str]:
        """Each ``paths`` entry that is, holds or is under a directory of :meth:`never`,
        with that directory (``"ENTRY (DIR)"``): a policy that allows one would let a
        fault stall the agent itself."""
        return [f"{allowed} ({d})" for allowed in self.paths for d in self.never()
                if _under(allowed, d) or _under(d, allowed)]

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
        if request.kind.startswith("net."):
            self._check_network(request.kind, target)
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
        if real == "/" or any(_under(real, d) or _under(d, real) for d in self.never()):
            raise PolicyRefused(f"{field_name} {value} ({real}) is, holds or is under a "
                                f"directory the agent never faults")
        if not any(_under(real, allowed) for allowed in self.paths):
            raise PolicyRefused(f"{field_name} {real} is not under a path {self.source} "
                                f"allows ({', '.join(self.paths) or 'none'})")
        return real

    def _check_network(self, kind: str, target: Mapping[str, Any]) -> None:
        """The interfaces a net kind acts on: ``target.link`` (in ``target.netns`` if
        given), else every interface of the namespace (of the host without one), each
        allowed. A namespace that is the agent's own under another name is the host's."""
        netns = target.get("netns")
        if isinstance(netns, str) and _same_netns_as_host(netns):
            netns = None
        if "link" in target:
            self.check_interface(target["link"], netns=netns)
            return
        if netns is None:
            if "*" not in self.interfaces:
                raise PolicyRefused(f"{kind} without target.link touches every interface; "
                                    f"{self.source} allows only named ones")
            defaults = default_route_interfaces()
            if defaults:
                raise PolicyRefused(f"{kind} without target.link touches every interface, "
                                    f"the default-route one too ({', '.join(sorted(defaults))}"
                                    f"), which {self.source} allows only when named")
            return
        if not isinstance(netns, str):
            raise PolicyRefused("target.netns must be a namespace name")
        for name in namespace_interfaces(netns):
            self.check_interface(name, netns=netns)

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
            if any(self.cgroup_allowed(g) for g in groups):
                return None
        return f"pid {pid} is not a process {self.source} allows"

    def cgroup_allowed(self, relative: str) -> bool:
        """Whether the cgroup path ``relative`` (as ``/proc/PID/cgroup`` shows it) is at
        or under one of ``processes.cgroups``, by path components."""
        return any(_under(relative, allowed) for allowed in self.process_cgroups)

    def check_cgroup_dir(self, real: str, pids: Iterable[int],
                         guard: Callable[[int], str | None]) -> None:
        """:class:`PolicyRefused` unless the cgroup directory ``real`` (a real path under
        ``/sys/fs/cgroup``) is at or under an allowed cgroup (``processes.cgroups``, the
        part below the hierarchy's mount: ``/sys/fs/cgroup/freezer/P/x`` is ``/P/x``) and
        ``guard`` allows each of ``pids``, every process in it (the answer never names one
        it does not allow)."""
        relative = _cgroup_relative(real)
        if relative is None or relative == "/" or not self.cgroup_allowed(relative):
            raise PolicyRefused(f"target.cgroup {real} is not a cgroup {self.source} allows "
                                f"(processes.cgroups: "
                                f"{', '.join(self.process_cgroups) or 'none'})")
        for pid in pids:
            if guard(pid) is not None:
                raise PolicyRefused(f"target.cgroup {real} holds a process {self.source} "
                                    f"does not allow")


def namespace_interfaces(netns: str) -> list[str]:
    """The names of every interface of the network namespace ``/run/netns/NETNS``;
    :class:`PolicyRefused` if it cannot be read (nothing unread is allowed)."""
    try:
        with route(netns) as ipr:
            return [str(link.get("ifname")) for link in ipr.get_links()]
    except Exception as exc:
        raise PolicyRefused(f"target.netns {netns}: cannot list its interfaces "
                            f"({first_line(exc)})") from None


def _cgroup_relative(real: str) -> str | None:
    """The cgroup path of the directory ``real`` below its hierarchy's mount point
    (``/sys/fs/cgroup/freezer/a/b`` on v1 and ``/sys/fs/cgroup/a/b`` on v2 are ``/a/b``);
    None outside ``/sys/fs/cgroup``."""
    root = "/sys/fs/cgroup"
    if not _under(real, root):
        return None
    parts = [p for p in real[len(root):].split("/") if p]
    if parts and os.path.ismount(f"{root}/{parts[0]}"):  # a v1 hierarchy (or unified)
        parts = parts[1:]
    return "/" + "/".join(parts)


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
