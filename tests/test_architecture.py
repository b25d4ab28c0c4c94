"""The package rules of docs/architecture.md, checked on the source (no module is run).

Every module of ``gameday/``, ``faults/`` and ``verifiers/`` is parsed (``ast``) and ALL
its imports are collected: at module level, inside functions and classes, and under
``if TYPE_CHECKING:``. A relative import is resolved against its package, and
``from package import name`` is an import of the module ``package.name`` where that is a
module of ours, else of ``package``. An import names one module: importing
``a.b.c`` is an edge to ``a.b.c`` only (not to the packages ``a`` and ``a.b``, whose
``__init__`` modules are checked as modules of their own). Imports of anything that is
not ours (the standard library, chaoslib, ...) are ignored.

The package graph: a package is a module's first two name levels for ``gameday``
(``gameday.engine``, ``gameday.wire``, ``gameday.activity``; the root ``gameday`` is one
too) and the first for ``faults`` and ``verifiers``. It must be a DAG, counting every
import above (inside functions, under ``TYPE_CHECKING``), and it must agree with the
layers docs/architecture.md lists top to bottom (read from that page): every package is
in exactly one layer, every layer names packages that exist, and every import between
two packages goes from a higher layer to a lower one.

The module rules, where ``X -> Y`` means a module of X (the package or any module under
it) imports a module of Y:

- no import cycle, of any length, not even through imports inside functions;
- one door: ``faults``/``verifiers`` import ``gameday.*`` only through
  ``gameday.activity`` and the bottom of the house (:data:`ACTIVITY_MAY_IMPORT`), which
  imports nothing above itself;
- the orchestrator's parts (:data:`ORCHESTRATOR`) -> ``gameday.agent``/``gameday.node``
  never: they reach an agent through the agent API;
- nothing outside ``gameday.lab`` imports ``gameday.lab``, with one exception: the lab
  target, ``gameday.targets.lab``, may import ``gameday.lab.api`` (the lab's public
  start/stop/status surface, which the CLI's ``lab up|status|down`` and a run or
  playbook with target ``lab`` reach through that target). So the engine
  (``gameday.engine``, ``gameday.experiment``, ``gameday.safety``, ``gameday.evidence``,
  ``gameday.gamedays``, ``gameday.report``, ``gameday.cli``, ``gameday.controls``, the
  rest of ``gameday.targets``) never imports the lab;
- ``gameday.lab`` -> ``faults``/``verifiers`` never, nor ``faults``/``verifiers`` ->
  ``gameday.lab``;
- ``faults``/``verifiers`` -> ``gameday.agent``/``gameday.node`` never (what runs in an
  agent is never imported by an activity);
- ``verifiers`` -> ``faults`` never, ``faults`` -> ``verifiers`` never;
- ``gameday.agent``/``gameday.node`` -> ``gameday.engine``, ``gameday.cli``,
  ``gameday.gamedays``, ``gameday.report`` never;
- engines return results and the CLI prints them: ``gameday.engine`` -> ``gameday.report``
  never, ``gameday.gamedays`` -> ``gameday.report.terminal`` never (a playbook's live
  progress goes to the console and printer its caller injects), and
  ``gameday.report.terminal`` -> ``gameday.gamedays``/``gameday.engine``/``gameday.cli``
  never (the CLI passes it what it shows, projections included). ``gameday.evidence.summary``
  (a journal read into a summary) is shared by reports and game days.

- ``gameday.kinds`` (every fault kind, declared once) is at the bottom of the house: it
  imports nothing of ours but ``gameday.errors``, ``gameday.contract`` and itself, so
  the orchestrator and the agent side can both read it.

And no file tracked by git outside ``.ci/`` cites the house plan (the section sign after
its name, or a path into the shared folder above the repository).
"""

import ast
import concurrent.futures
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("gameday", "faults", "verifiers")

#: The one module outside the lab allowed to import it, and what it may import.
LAB_GATE = "gameday.targets.lab"
LAB_SURFACE = "gameday.lab.api"
#: ``gameday.testing`` is a test utility for users, not the engine: its in-process agent
#: runs the lab's virtual GPUs.
TESTING_LAB = ("gameday.testing", "gameday.lab.devices")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``where``."""

    source: str
    target: str
    where: str  # path:line

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def module_files() -> dict[str, Path]:
    """Every module of ours by its dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name: str, modules: Iterable[str]) -> str | None:
    """``name`` if it is a module of ours, else its longest prefix that is, else None."""
    known = set(modules)
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _parse(path: Path) -> ast.Module:
    """``path``'s syntax tree. CPython 3.11 can raise ``SystemError: AST constructor
    recursion depth mismatch`` in a thread whose recursion counters another test left
    odd (seen once in a pytest-xdist worker): then it is parsed on a fresh thread."""
    source = path.read_text(encoding="utf-8")
    try:
        return ast.parse(source, filename=str(path))
    except SystemError:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(ast.parse, source, str(path)).result()


def imports_of(module: str, path: Path, modules: set[str]) -> list[Import]:
    """All imports of one module, wherever they are in it, resolved to modules of ours."""
    tree = _parse(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    where = path.relative_to(REPO)
    edges: list[Import] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            for alias in node.names:
                full = f"{stem}.{alias.name}"
                names.append(full if full in modules else stem)
        for name in names:
            target = _known(name, modules)
            if target is not None and target != module:
                edges.append(Import(module, target, f"{where}:{node.lineno}"))
    return edges


def all_imports() -> list[Import]:
    """Every import of every module, once per statement and module imported."""
    files = module_files()
    modules = set(files)
    edges = [edge for module, path in files.items() for edge in imports_of(module, path, modules)]
    return list(dict.fromkeys(edges))


def under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one module
    (Tarjan's algorithm, iterative), its modules sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_of(module: str) -> str:
    """The package a module belongs to in the package graph: ``gameday.engine.session``
    -> ``gameday.engine``, ``gameday.activity`` -> itself, ``faults.kinds.gpu`` -> ``faults``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gameday" else parts[0]


def package_edges(edges: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """The package graph: (importing package, imported package) -> the imports behind it."""
    found: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for edge in edges:
        source, target = package_of(edge.source), package_of(edge.target)
        if source != target:
            found[source, target].append(edge)
    return dict(found)


def packages() -> set[str]:
    return {package_of(module) for module in module_files()}


def documented_layers() -> list[list[str]]:
    """The layers docs/architecture.md lists under "## Layers", top to bottom: one
    numbered line each (``3. `gameday.report`, `gameday.gamedays`: ...``), its packages
    the backquoted names before the colon."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    items: list[str] = []
    for line in section.splitlines():
        if re.match(r"^\d+\. ", line):
            items.append(line)
        elif items and line.startswith("   "):  # an item's continuation line
            items[-1] += " " + line.strip()
    layers: list[list[str]] = []
    for item in items:
        numbered = re.match(r"^(\d+)\. (.*?):", item)
        if numbered:
            assert int(numbered.group(1)) == len(layers) + 1, f"layers out of order: {item}"
            layers.append(re.findall(r"`([a-z_.]+)`", numbered.group(2)))
    return layers


def test_the_package_graph_is_a_dag() -> None:
    """No two packages import each other, nor does any longer loop of packages close."""
    graph = package_edges(all_imports())
    loops = cycles([Import(source, target, "") for source, target in graph])
    lines = []
    for component in loops:
        members = set(component)
        lines.append(" -> ".join(component))
        lines.extend(f"    {edge}" for (source, target), found in sorted(graph.items())
                     if source in members and target in members for edge in found)
    assert not loops, "packages that import each other (each loop, then its imports):\n" \
        + "\n".join(lines)



def test_the_layers_of_the_architecture_page_match_the_package_graph() -> None:
    layers = documented_layers()
    listed = [name for layer in layers for name in layer]
    existing = packages()
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not twice, f"docs/architecture.md lists these in more than one layer: {twice}"
    missing = sorted(existing - set(listed))
    assert not missing, f"packages in no layer of docs/architecture.md: {missing}"
    absent = sorted(set(listed) - existing)
    assert not absent, f"docs/architecture.md lists layers' packages that do not exist: {absent}"
    rank = {name: position for position, layer in enumerate(layers) for name in layer}
    upward = [f"{edge} (layer {rank[source] + 1} -> layer {rank[target] + 1})"
              for (source, target), found in sorted(package_edges(all_imports()).items())
              if rank[source] >= rank[target] for edge in found]
    assert not upward, ("imports that do not go down the layers of docs/architecture.md:\n"
                        + "\n".join(upward))


#: What ``faults`` and ``verifiers`` may import of ``gameday`` besides ``gameday.activity``
#: (the one door to the engine): the bottom of the house, which imports nothing above it.
#: The root (its version), errors, the clock, bounded reads and atomic writes, the
#: statistics, what both sides agree on (``contract``), the fault kinds (``kinds``), and
#: the read-only clients of the systems under test (HTTP, PromQL, the Kubernetes API).
ACTIVITY_MAY_IMPORT: frozenset[str] = frozenset({
    "gameday", "gameday.activity", "gameday.errors", "gameday.clock", "gameday.bounded",
    "gameday.atomic", "gameday.stats", "gameday.contract", "gameday.kinds",
    "gameday.httpclient", "gameday.promql", "gameday.kube", "gameday.integrations"})


def test_faults_and_verifiers_reach_the_engine_through_one_door() -> None:
    bad = [str(edge) for edge in all_imports()
           if package_of(edge.source) in ("faults", "verifiers")
           and package_of(edge.target).startswith("gameday")
           and package_of(edge.target) not in ACTIVITY_MAY_IMPORT]
    assert not bad, ("faults/verifiers import gameday.* only through gameday.activity and "
                     "the bottom (ACTIVITY_MAY_IMPORT):\n" + "\n".join(bad))


def test_the_bottom_of_the_house_imports_nothing_above_it() -> None:
    """What faults and verifiers may import besides the door stands on nothing but
    itself: a bottom package imports only bottom packages."""
    bottom = ACTIVITY_MAY_IMPORT - {"gameday.activity"}
    bad = [str(edge) for (source, target), found in package_edges(all_imports()).items()
           if source in bottom and target not in bottom for edge in found]
    assert not bad, "the bottom of the house imports above it:\n" + "\n".join(bad)


#: The orchestrator's parts: they reach an agent only through the agent API (the wire).
ORCHESTRATOR = ("gameday.engine", "gameday.targets", "gameday.safety", "gameday.experiment",
                "gameday.evidence", "gameday.gamedays", "gameday.report", "gameday.activity",
                "gameday.controls", "faults", "verifiers")
#: Known and not yet cut: the self-signal guard resolves a selector the way an agent on
#: this host would, with the agent side's /proc reading (``find_processes``) and its
#: protected processes (``refuse_protected``). That reading is to move to a package at
#: the bottom of the house that both sides import. This set may only shrink.
ORCHESTRATOR_NOT_YET_CUT: frozenset[tuple[str, str]] = frozenset({
    ("gameday.engine.selfguard", "gameday.node.processes"),
    ("gameday.engine.selfguard", "gameday.node.host.process")})


def test_the_orchestrator_reaches_agents_only_through_the_agent_api() -> None:
    edges = all_imports()
    bad = _offending(edges, ORCHESTRATOR, ("gameday.agent", "gameday.node"),
                     allowed=ORCHESTRATOR_NOT_YET_CUT)
    assert not bad, "orchestrator code imports agent-side code:\n" + "\n".join(bad)
    gone = ORCHESTRATOR_NOT_YET_CUT - {(e.source, e.target) for e in edges}
    assert not gone, f"cut since: take them off ORCHESTRATOR_NOT_YET_CUT: {sorted(gone)}"


def test_the_import_graph_is_read() -> None:
    """The parser sees imports inside functions and under TYPE_CHECKING, and resolves
    relative and ``from package import module`` forms (on the real tree)."""
    edges = {(e.source, e.target) for e in all_imports()}
    assert ("gameday.engine.session", "gameday.engine.leases") in edges  # from x.y import Z
    assert ("gameday.cli.main", "gameday.engine.runner") in edges
    assert len(edges) > 300


def test_no_import_cycles() -> None:
    edges = all_imports()
    found = cycles(edges)
    lines = []
    for component in found:
        members = set(component)
        lines.append(" -> ".join(component))
        lines.extend(f"    {edge}" for edge in edges
                     if edge.source in members and edge.target in members)
    assert not found, "import cycles (each: its modules, then their imports):\n" + "\n".join(lines)


def _offending(edges: list[Import], sources: tuple[str, ...], targets: tuple[str, ...],
               allowed: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    return [str(e) for e in edges
            if under(e.source, *sources) and under(e.target, *targets)
            and (e.source, e.target) not in allowed]


def _outside(edges: list[Import], package: str) -> tuple[str, ...]:
    return tuple(sorted({e.source for e in edges if not under(e.source, package)}))


def test_nothing_but_the_lab_target_imports_the_lab() -> None:
    edges = all_imports()
    bad = _offending(edges, _outside(edges, "gameday.lab"), ("gameday.lab",),
                     allowed=frozenset({(LAB_GATE, LAB_SURFACE), TESTING_LAB}))
    assert not bad, (f"only {LAB_GATE} may import the lab (and only {LAB_SURFACE}; "
                     f"{TESTING_LAB[0]} its virtual GPUs):\n"
                     + "\n".join(bad))


def test_the_lab_and_the_activities_do_not_import_each_other() -> None:
    edges = all_imports()
    bad = (_offending(edges, ("gameday.lab",), ("faults", "verifiers"))
           + _offending(edges, ("faults", "verifiers"), ("gameday.lab",)))
    assert not bad, "the lab is sealed from faults/verifiers:\n" + "\n".join(bad)


#: Imports of agent-side code by the activities that are known and not yet cut: the fault
#: vocabulary the agent and the fault kinds share (injection layers, the request, the
#: backend protocol; the fault filesystem's operations and errnos) still lives agent-side.
#: It is to move to a module both sides may import; this list may only shrink.
NOT_YET_CUT: frozenset[tuple[str, str]] = frozenset()


def test_activities_do_not_import_what_runs_in_an_agent() -> None:
    edges = all_imports()
    bad = _offending(edges, ("faults", "verifiers"), ("gameday.agent", "gameday.node"),
                     allowed=NOT_YET_CUT)
    assert not bad, "faults/verifiers import agent-side code:\n" + "\n".join(bad)
    gone = NOT_YET_CUT - {(e.source, e.target) for e in edges}
    assert not gone, f"cut since: take them off NOT_YET_CUT: {sorted(gone)}"


def test_verifiers_and_faults_do_not_import_each_other() -> None:
    edges = all_imports()
    bad = (_offending(edges, ("verifiers",), ("faults",))
           + _offending(edges, ("faults",), ("verifiers",)))
    assert not bad, "verifiers never inject, faults never judge:\n" + "\n".join(bad)


def test_the_agent_side_does_not_import_the_orchestrator() -> None:
    bad = _offending(all_imports(), ("gameday.agent", "gameday.node"),
                     ("gameday.engine", "gameday.cli", "gameday.gamedays", "gameday.report"))
    assert not bad, "agent/node import orchestrator code:\n" + "\n".join(bad)


def test_engines_return_results_and_the_cli_prints_them() -> None:
    edges = all_imports()
    bad = (_offending(edges, ("gameday.engine", "gameday.gamedays", "gameday.evidence",
                                   "gameday.safety", "gameday.targets"), ("gameday.report",))
           + _offending(edges, ("gameday.report.terminal",),
                        ("gameday.gamedays", "gameday.engine", "gameday.cli")))
    assert not bad, "an engine imports the reports, or a report an engine:\n" + "\n".join(bad)


#: What the fault kinds' declarations may import: the bottom of the house only.
KINDS_MAY_IMPORT = ("gameday.kinds", "gameday.errors", "gameday.contract")


def test_the_kinds_import_only_the_bottom_of_the_house() -> None:
    bad = [str(e) for e in all_imports() if under(e.source, "gameday.kinds")
           and not under(e.target, *KINDS_MAY_IMPORT)]
    assert not bad, "gameday.kinds imports above the bottom of the house:\n" + "\n".join(bad)


def test_no_file_cites_the_house_plan() -> None:
    banned = ("DESIGN " + "\N{SECTION SIGN}", "../" + "shared/")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                             capture_output=True).stdout.decode().split("\0")
    hits = []
    for name in tracked:
        path = REPO / name
        if not name or name.startswith(".ci/") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            hits.extend(f"{name}:{number}: {word}" for word in banned if word in line)
    assert not hits, ("files cite the house plan (docs/architecture.md is the plan):\n"
                      + "\n".join(hits))
