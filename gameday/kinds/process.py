"""Process fault kinds: a process killed, or paused (SIGSTOP) and continued (SIGCONT)."""

from dataclasses import dataclass

from gameday.kinds.params import param
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["KINDS", "PROCESS_KILL", "PROCESS_PAUSE", "PROCESS_SELECTOR", "KillParams",
           "PauseParams"]

_ENV = SelectorKey("env", (dict,), "host: processes with these environment values",
                   labels=True)
#: A process's parent, as a selector of its own (one level: no parent of its own).
PARENT_SELECTOR = Selector(
    argument="parent",
    doc="host: the parent whose children are selected: {pid | name | cmdline, env, cgroup}",
    keys=(SelectorKey("pid", (int,), "this process id"),
          SelectorKey("name", (str,), "processes with this command name"),
          SelectorKey("cmdline", (str,), "processes whose command line matches"),
          _ENV,
          SelectorKey("cgroup", (str,), "processes whose cgroup matches")),
    nullable=False)
#: A container of a Kubernetes pod.
POD_SELECTOR = Selector(
    argument="pod",
    doc="kubernetes: {namespace, name | labels | label_selector, container}",
    keys=(SelectorKey("namespace", (str,), "the pod's namespace"),
          SelectorKey("name", (str,), "the pod by name"),
          SelectorKey("labels", (dict,), "pods with these labels", labels=True),
          SelectorKey("label_selector", (str,), "pods matching this label selector"),
          SelectorKey("container", (str,), "the container (default: the only one)")),
    nullable=False)

PICK_SELECTOR = Selector(
    argument="pick",
    doc="a seeded pick of the matches: {count: N, seed: S} or {percent: P, seed: S}",
    keys=(SelectorKey("count", (int,), "how many of the matches"),
          SelectorKey("percent", (float,), "which share of the matches, in percent"),
          SelectorKey("seed", (int,), "the seed of the pick (the same seed, the same pick)")))

PROCESS_SELECTOR = Selector(
    argument="process",
    doc="which process: {shard: N} | {role: router} (lab) | {pid: N} | {name: COMM} | "
        "{cmdline: REGEX} (host), narrowed or selected by env: {RANK: '1', "
        "TORCHELASTIC_RUN_ID: ID}, parent: {name: torchrun} (its children), cgroup: REGEX "
        "(host), pod: {namespace, name | labels, container} (kubernetes); optionally with "
        "node: NAME",
    keys=(SelectorKey("shard", (int,), "lab: the shard's server"),
          SelectorKey("role", (str,), "lab: router, controller or trainer"),
          SelectorKey("pid", (int,), "host: this process id"),
          SelectorKey("name", (str,), "host: processes with this command name"),
          SelectorKey("cmdline", (str,), "host: processes whose command line matches"),
          SelectorKey("node", (str,), "the node"),
          _ENV,
          SelectorKey("parent", (dict,), "host: the children of the process it selects",
                      nested=PARENT_SELECTOR),
          SelectorKey("cgroup", (str,), "host: processes whose cgroup matches"),
          SelectorKey("pod", (dict,), "kubernetes: a container of a pod",
                      nested=POD_SELECTOR),
          SelectorKey("pick", (dict,), "some of the matches: a seeded pick the plan shows "
                      "and the journal records", nested=PICK_SELECTOR)),
    nullable=False)

_MAX_DOC = ("refuse (nothing signalled) when the selector matches more processes than "
            "this")


@dataclass(frozen=True, kw_only=True)
class KillParams(KindParams):
    """``process.kill``'s parameters."""

    max_processes: int = param(_MAX_DOC, default=1, minimum=1, maximum=1000)


@dataclass(frozen=True, kw_only=True)
class PauseParams(KindParams):
    """``process.pause``'s parameters."""

    max_processes: int = param(_MAX_DOC, default=1, minimum=1, maximum=1000)
    duration_s: float | None = param("how long it stays stopped before it is continued "
                                     "(null: until reverted or its lease lapses)",
                                     default=None, minimum=0.05, maximum=86400.0)


PROCESS_KILL = KindSpec(
    name="process.kill",
    summary="a process is killed with SIGKILL (no clean shutdown); reverting cannot "
            "bring it back: its supervisor must",
    module="faults.process",
    func="kill",
    coverage_layer="container",
    family="Process crash",
    also_layers=("service",),
    injected_at={"lab": "process", "host": "process"},
    selects=PROCESS_SELECTOR,
    params_type=KillParams,
    seen_through="connection refused / 5xx until the process is restarted; restarts in "
                 "the controller's placement events",
    tags=("process", "kill", "crash"),
)

PROCESS_PAUSE = KindSpec(
    name="process.pause",
    summary="a process is frozen with SIGSTOP: it holds its sockets and answers nothing "
            "until SIGCONT (on revert, or after duration_s)",
    module="faults.process",
    func="pause",
    coverage_layer="container",
    family="Process hang",
    also_layers=("service",),
    injected_at={"lab": "process", "host": "process"},
    selects=PROCESS_SELECTOR,
    params_type=PauseParams,
    seen_through="requests that hang until the client's timeout (router 503 after 5 s), "
                 "then in-flight answers arriving at once when continued",
    tags=("process", "pause", "sigstop", "hang"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (PROCESS_KILL, PROCESS_PAUSE)
