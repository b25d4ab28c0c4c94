"""``make demo`` runs the flagship experiment on the lab with ``--html``: the run writes
its report itself and names it on one ``report:`` line (the recipe once rendered it again
and printed a second, different one)."""

import re

from tests.conftest import REPO


def test_the_demo_runs_the_flagship_on_the_lab_and_lets_the_run_write_its_report() -> None:
    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    (run,) = re.findall(r"gameday run (\S+\.yaml) (.*)", recipe)
    assert (REPO / run[0]).is_file()
    assert run[1].split() == ["--target", "lab", "--html"]
    assert "gameday report" not in recipe and "echo" not in recipe
