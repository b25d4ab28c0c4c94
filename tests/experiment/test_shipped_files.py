"""Every file the repository ships validates as shipped, through ``gameday validate`` run
in-process (``main(argv)``): each experiment, playbook (with what it names), fault mix
and coverage requirement file, and what every ``gameday init`` template writes. And a
playbook whose experiments do not validate is not reported valid."""

from pathlib import Path

import pytest

from gameday.cli.main import main
from tests.conftest import REPO

SHIPPED = sorted([*(REPO / "experiments").glob("*.yaml"), *(REPO / "playbooks").rglob("*.yaml")])


def _templates(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["init", "--list"]) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_every_shipped_file_validates(capsys: pytest.CaptureFixture[str]) -> None:
    kinds = {"experiment", "playbook", "fault mix", "requirements"}
    assert len(SHIPPED) >= 25
    status = main(["validate", *map(str, SHIPPED)])
    out, err = capsys.readouterr()
    assert status == 0 and not err, err
    lines = out.splitlines()
    assert all(line.endswith(": valid") for line in lines), out
    verdicts = {line.split(": ")[0]: line.split(": ")[1] for line in lines
                if ", named by " not in line}
    assert {str(path) for path in SHIPPED} == set(verdicts)
    assert set(verdicts.values()) == kinds, verdicts


def test_what_every_init_template_writes_validates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    templates = _templates(capsys)
    assert len(templates) >= 6 and "lab" in templates
    for template in templates:
        written = tmp_path / f"{template}.yaml"
        assert main(["init", "--template", template, str(written)]) == 0
        capsys.readouterr()
        assert main(["validate", str(written)]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.strip() == f"{written}: experiment: valid"


def test_a_playbook_naming_an_invalid_experiment_is_not_valid(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flagship = (REPO / "experiments" / "gpu-ecc-dbe-reshard.yaml").read_text()
    (tmp_path / "good.yaml").write_text(flagship)
    (tmp_path / "bad.yaml").write_text(flagship.replace("${service_url}", "${nowhere_url}"))
    playbook = tmp_path / "day.yaml"
    playbook.write_text("version: 1\ntitle: t\ntarget: lab\nexperiments:\n"
                        "  - {path: good.yaml}\n  - {path: bad.yaml}\n")
    assert main(["validate", str(playbook)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{playbook}: playbook: invalid: 3 errors in 1 of the 2 "
                        "experiments it names")
    assert main(["validate", str(playbook), "--output", "json"]) == 2
    out = capsys.readouterr().out
    assert '"valid": false' in out.split('"file"')[1]
