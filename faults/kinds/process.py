"""Process fault kinds: a process killed, or paused (SIGSTOP) and continued (SIGCONT)."""

from faults.base import FaultKind, Param

PROCESS_SELECTOR_DOC = ("which process: {shard: N} | {role: router} (lab) | {pid: N} | "
                        "{name: COMM} | {cmdline: REGEX} (host), narrowed or selected by "
                        "env: {RANK: '1', TORCHELASTIC_RUN_ID: ID}, parent: {name: torchrun} "
                        "(its children), cgroup: REGEX (host); optionally with node: NAME")

_MAX = Param("max_processes", int, "refuse (nothing signalled) when the selector matches "
             "more processes than this", default=1, minimum=1, maximum=1000)

PROCESS_KILL = FaultKind(
    name="process.kill",
    summary="a process is killed with SIGKILL (no clean shutdown); reverting cannot "
            "bring it back: its supervisor must",
    module="faults.process",
    func="kill",
    coverage_layer="container",
    family="Process crash",
    also_layers=("service",),
    injected_at={"lab": "process", "host": "process"},
    selector="process",
    params=(_MAX,),
    seen_through="connection refused / 5xx until the process is restarted; restarts in "
                 "the controller's placement events",
    tags=("process", "kill", "crash"),
)

PROCESS_PAUSE = FaultKind(
    name="process.pause",
    summary="a process is frozen with SIGSTOP: it holds its sockets and answers nothing "
            "until SIGCONT (on revert, or after duration_s)",
    module="faults.process",
    func="pause",
    coverage_layer="container",
    family="Process hang",
    also_layers=("service",),
    injected_at={"lab": "process", "host": "process"},
    selector="process",
    params=(
        _MAX,
        Param("duration_s", float, "how long it stays stopped before it is continued "
              "(null: until reverted or its lease lapses)", default=None, minimum=0.05,
              maximum=86400.0, nullable=True),
    ),
    seen_through="requests that hang until the client's timeout (router 503 after 5 s), "
                 "then in-flight answers arriving at once when continued",
    tags=("process", "pause", "sigstop", "hang"),
)

KINDS: tuple[FaultKind, ...] = (PROCESS_KILL, PROCESS_PAUSE)
