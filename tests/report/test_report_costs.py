"""Cost projections are shown only for a fleet a run says it stands for, only for
training, and always with what they assume (the fleet, the failure statistics, the model).

The journal is a real one recorded on the lab (tests/report/data); the playbook files are
written by the test and read by the real loader."""

import copy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.errors import InvalidInput
from gameday.evidence.summary import summarize
from gameday.gamedays.costs import LLAMA3_SOURCE, Fleet, no_projection, project
from gameday.gamedays.playbook import load_playbook
from gameday.report.document import render_html, render_markdown
from gameday.report.playbook import PlaybookReport, Row
from gameday.report.playbook import render_html as playbook_html
from gameday.report.timeline import number
from tests.report.reports_helpers import real_journal

SUMMARY_ARGS = {"path": "flagship.json", "sha256": "0" * 64}


def _pages(fleet: Fleet | None) -> tuple[str, str]:
    journal = real_journal("flagship")
    summary = summarize(journal, **SUMMARY_ARGS)
    return render_html(journal, summary, fleet), render_markdown(journal, summary, fleet)


def test_a_run_that_names_no_fleet_projects_nothing_and_says_why() -> None:
    for page in _pages(None):
        assert "does not say what fleet it stands for" in page
        assert "GPU-hours lost" not in page and "this fleet" not in page


def test_a_serving_fleet_is_not_projected_with_training_statistics() -> None:
    for page in _pages(Fleet(gpus=512, workload="serving", stated=True)):
        assert "serving fleet" in page and "GPU-hours lost" not in page


def test_a_stated_training_fleet_is_projected_with_its_assumptions() -> None:
    html, markdown = _pages(Fleet(gpus=2048, stated=True))
    for page in (html, markdown):
        assert "2,048-GPU training job" in page
        assert "stops whenever one of them is interrupted" in page
        assert "Llama 3" in page  # the statistics' source, named
    assert "(the fleet this run stands for)" in html


@settings(max_examples=100, deadline=None)
@given(gpus=st.integers(1, 10**6), rate=st.floats(0, 1, allow_nan=False),
       workload=st.sampled_from(["training", "serving"]), stated=st.booleans(),
       rto=st.floats(0, 1e5, allow_nan=False), rpo=st.floats(0, 1e5, allow_nan=False))
def test_a_projection_exists_exactly_for_a_stated_training_fleet_and_round_trips(
        gpus: int, rate: float, workload: str, stated: bool, rto: float, rpo: float) -> None:
    fleet = Fleet(gpus=gpus, interruptions_per_gpu_day=rate, source="s",
                  workload="serving" if workload == "serving" else "training", stated=stated)
    assert (no_projection(fleet) is None) == (stated and workload == "training")
    assert Fleet.from_json(fleet.to_json()) == fleet
    projection = project(rto, rpo, fleet)
    assert 0 < projection.ettr <= 1
    assert projection.gpu_hours_lost_per_day == pytest.approx(gpus * 24 * (1 - projection.ettr))


def test_a_playbook_states_its_fleet_only_by_naming_its_size(tmp_path: Path) -> None:
    experiment = Path(__file__).resolve().parents[2] / "experiments" / "gpu-ecc-dbe-reshard.yaml"
    body = f"version: 1\ntitle: costs\nexperiments:\n  - {{name: ecc, path: {experiment}}}\n"
    (tmp_path / "a.yaml").write_text(body)
    assert not load_playbook(tmp_path / "a.yaml").fleet.stated
    (tmp_path / "b.yaml").write_text(body + "costs: {fleet_gpus: 4096, workload: serving}\n")
    fleet = load_playbook(tmp_path / "b.yaml").fleet
    assert (fleet.stated, fleet.gpus, fleet.workload, fleet.source) == (True, 4096, "serving",
                                                                        LLAMA3_SOURCE)
    (tmp_path / "c.yaml").write_text(body + "gate: {min_ettr: 0.99}\n")
    with pytest.raises(InvalidInput, match=r"gate\.min_ettr.*does not say what fleet"):
        load_playbook(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text(body + "costs: {fleet_gpus: 8, workload: serving}\n"
                                            "gate: {min_ettr: 0.99}\n")
    with pytest.raises(InvalidInput, match=r"gate\.min_ettr.*serving fleet"):
        load_playbook(tmp_path / "d.yaml")


def test_a_slowdown_is_charged_the_work_it_cost_not_as_work_redone() -> None:
    """A real journal: net.latency (1 ms) on one rank's link of a torchrun DDP job, its
    throughput measured by ``throughput.degradation`` (tests/workloads/test_ddp_latency.py).
    Its ``lost_s`` is work a slowdown cost, not an RPO; the page shows the goodput and
    charges each interruption that work."""
    journal = real_journal("ddp-latency")
    m = journal["gameday"]["verifiers"][0]["measurement"]
    summary = summarize(journal, **SUMMARY_ARGS)
    assert summary.rpo_s is None and summary.recover_s is None
    assert summary.slowdown_lost_s == m["lost_s"]
    assert summary.slowdown_pct == m["slowdown_pct"]
    assert summary.goodput == pytest.approx(m["during"]["rate"] / m["baseline"]["rate"])
    share = f"{summary.goodput:.0%} of the baseline rate"
    for page in (render_html(journal, summary, None), render_markdown(journal, summary, None)):
        assert f"Goodput during the fault: {share}" in page
        assert "does not say what fleet it stands for" in page
    fleet = Fleet(gpus=16_384, stated=True)
    expected = project(0.0, 0.0, fleet, slowdown_s=m["lost_s"])
    for page in (render_html(journal, summary, fleet), render_markdown(journal, summary, fleet)):
        assert f"a slowdown that cost {m['lost_s']:.3g} s of work" in page
        assert f"{expected.ettr:.5f}" in page and "work redone" not in page


@settings(max_examples=200, deadline=None)
@given(rto=st.floats(0, 1e4, allow_nan=False), rpo=st.floats(0, 1e4, allow_nan=False),
       slowdown=st.floats(0, 1e4, allow_nan=False), gpus=st.integers(1, 10**6))
def test_each_interruption_is_charged_the_larger_of_outage_and_slowdown_never_both(
        rto: float, rpo: float, slowdown: float, gpus: int) -> None:
    fleet = Fleet(gpus=gpus, stated=True)
    charged = project(rto, rpo, fleet, slowdown_s=slowdown)
    alone = project(max(rto + rpo, slowdown), 0.0, fleet)
    assert charged.ettr == pytest.approx(alone.ettr)
    assert charged.ettr <= project(rto, rpo, fleet).ettr
    assert charged.ettr >= project(rto + rpo + slowdown, 0.0, fleet).ettr
    assert charged.slowdown_counted == (slowdown > rto + rpo)
    with pytest.raises(InvalidInput):
        project(rto, rpo, fleet, slowdown_s=-1.0)


def test_a_game_day_of_slowdowns_draws_each_runs_slowdown_against_its_objective() -> None:
    """A game day's page draws one slowdown bar per run (with several delays, the
    throughput curve): the real DDP run (73 %, objective 95 %) and the same run as if
    the job had kept half its pace (50 %)."""
    journal = real_journal("ddp-latency")
    halved = copy.deepcopy(journal)
    m = halved["gameday"]["verifiers"][0]["measurement"]
    m["during"]["rate"], m["slowdown_pct"] = m["baseline"]["rate"] / 2, 50.0
    rows = [Row(name, "pass", "passed", True, None, summarize(j, **SUMMARY_ARGS), "")
            for name, j in (("1ms", journal), ("half", halved))]
    report = PlaybookReport("latency curve", "curve.yaml", 0.0, 1.0, 0, None, rows)
    page = playbook_html(report)
    slowdown = journal["gameday"]["verifiers"][0]["measurement"]["slowdown_pct"]
    assert "1ms: slowdown" in page and f"{number(slowdown)} %" in page
    assert "half: slowdown" in page and "50 %" in page and "objective 95 %" in page
