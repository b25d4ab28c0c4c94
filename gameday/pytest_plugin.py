"""A pytest plugin: experiment files as test items, so a release gate runs in any
pytest-based CI with pytest's own JUnit XML, ``-k`` selection and exit codes.

``pytest --gameday experiments/ --gameday-target lab`` collects every Chaos Toolkit
experiment file (``*.yaml``, ``*.yml``, ``*.json`` with a ``method``) under the given
paths. Each file gives one item for the run (it fails when ``gameday run`` would exit
non-zero, with the run's reasons) and one item per verifier probe of its method (each
fails with the verifier's own one-line reason, e.g. the SLO it missed and by how much).
The run happens once per file, when its first item runs; its journal is written under
``--gameday-journal-dir`` (default: where ``gameday run`` writes them) and hash-chained
like any other. With target ``lab`` and no lab running, one lab is started for the session and
stopped at its end.

The plugin is registered through the ``pytest11`` entry point and does nothing unless
``--gameday`` is given.
"""

import datetime
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gameday import paths
from gameday.errors import GamedayError
from gameday.evidence.journal_shape import gameday_section

if TYPE_CHECKING:
    from gameday.testing import ExperimentRun

__all__ = ["ExperimentFile", "ExperimentItem", "VerifierItem"]

SUFFIXES = (".yaml", ".yml", ".json")
_RUNS = pytest.StashKey[dict[Path, "ExperimentRun"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gameday", "gameday experiments as tests")
    group.addoption("--gameday", action="store_true", default=False,
                    help="collect Chaos Toolkit experiment files as test items")
    group.addoption("--gameday-target", default=None, metavar="TARGET",
                    help="lab, host, kubernetes or none (default: each experiment's own)")
    group.addoption("--gameday-journal-dir", default=None, metavar="DIR",
                    help="where the runs' journals go (default: $GAMEDAY_JOURNALS or "
                         "./journals, as for gameday run)")
    group.addoption("--gameday-var", action="append", default=[], metavar="KEY=VALUE",
                    help="a configuration value for every experiment (repeatable)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RUNS] = {}
    config.addinivalue_line("markers", "gameday: an experiment run by gameday")


def _is_experiment(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(document, dict) and "method" in document and "title" in document


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> "ExperimentFile | None":
    if not parent.config.getoption("gameday") or file_path.suffix not in SUFFIXES:
        return None
    if not _is_experiment(file_path):
        return None
    collected: ExperimentFile = ExperimentFile.from_parent(parent, path=file_path)
    return collected


@pytest.fixture(scope="session", autouse=True)
def _gameday_lab(request: pytest.FixtureRequest) -> Iterator[None]:
    """One lab for the whole session when the target is the lab and none runs."""
    config = request.config
    if not config.getoption("gameday") or config.getoption("gameday_target") != "lab":
        yield
        return
    from gameday.targets.lab import LabLease

    lease = LabLease(paths.lab_dir(), lambda line: None)
    lease.ensure()
    try:
        yield
    finally:
        lease.release()


class ExperimentFile(pytest.File):
    """One experiment file: its run, then each verifier of its method."""

    def collect(self) -> Iterator[pytest.Item]:
        with self.path.open(encoding="utf-8") as stream:
            document: dict[str, Any] = yaml.safe_load(stream)
        yield ExperimentItem.from_parent(self, name=str(document.get("title") or "run"))
        for activity in document.get("method") or []:
            provider = activity.get("provider") or {} if isinstance(activity, dict) else {}
            if (activity.get("type") == "probe" and provider.get("type") == "python"
                    and str(provider.get("module", "")).startswith("verifiers.")):
                yield VerifierItem.from_parent(self, name=str(activity.get("name")),
                                               probe=str(activity.get("name")))


class _GamedayItem(pytest.Item):
    def run_once(self) -> "ExperimentRun":
        """The file's run, made on first use and shared by its items."""
        runs = self.config.stash[_RUNS]
        path = self.path
        if path not in runs:
            runs[path] = self._run(path)
        return runs[path]

    def _run(self, path: Path) -> "ExperimentRun":
        from gameday.testing import run_experiment  # the engine loads only when asked

        config = self.config
        chosen = config.getoption("gameday_journal_dir")
        journal_dir = Path(chosen).absolute() if chosen else paths.journals_dir()
        journal_dir.mkdir(parents=True, exist_ok=True)
        variables = dict(_pair(text) for text in config.getoption("gameday_var"))
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        return run_experiment(path, home=paths.home(), target=config.getoption("gameday_target"),
                              variables=variables,
                              journal_path=journal_dir / f"{stamp}-{path.stem}.json")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"gameday: {self.name}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, ExperimentFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise pytest.UsageError(f"--gameday-var {text!r}: expected KEY=VALUE")
    return key, value


class ExperimentFailed(Exception):
    """An experiment or verifier item failed; its message is the whole report."""


class ExperimentItem(_GamedayItem):
    """The run: passes when ``gameday run`` would exit 0."""

    def runtest(self) -> None:
        try:
            run = self.run_once()
        except GamedayError as exc:
            raise ExperimentFailed(f"gameday: {exc}") from None
        if run.exit_code != 0:
            verdict: Mapping[str, Any] = gameday_section(run.journal).get("verdict") or {}
            reasons = "; ".join(verdict.get("reasons") or []) or run.output.strip()[-2000:]
            raise ExperimentFailed(f"exit {run.exit_code}: {reasons}")


class VerifierItem(_GamedayItem):
    """One verifier probe of the method: passes when the verifier held."""

    def __init__(self, *, probe: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe = probe

    def runtest(self) -> None:
        run = self.run_once()
        results = [r for r in run.verifiers if r.get("name") == self.probe]
        if not results:
            raise ExperimentFailed(f"verifier {self.probe!r} recorded no result (exit "
                                   f"{run.exit_code}: the run ended before it)")
        failed = [r for r in results if r.get("passed") is False]
        if failed:
            raise ExperimentFailed("; ".join(str(r.get("reason") or "failed") for r in failed))
