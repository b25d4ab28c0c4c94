"""The run report's charts and Markdown, read from real journals recorded on the lab."""

import copy
import re

from gameday.evidence.summary import summarize
from gameday.report.document import render_html, render_markdown
from gameday.report.svg import objectives_svg, timeline_svg
from gameday.report.terminal import verdict_table
from gameday.report.timeline import Objective, build_timeline, number, verifier_phases
from tests.report.reports_helpers import real_journal, varied


def _without_faults() -> dict[str, object]:
    journal = copy.deepcopy(real_journal("flagship"))
    journal["gameday"]["faults"] = []
    return journal


def test_the_slo_deadline_is_a_labelled_line_at_onset_plus_the_objective() -> None:
    line = build_timeline(real_journal("flagship"))
    assert line.deadline == 20.0 and line.end < 20.0  # the run ended long before it
    svg = timeline_svg(line)
    deadline = re.search(r'<g class="slo-deadline"><line x1="([\d.]+)"', svg)
    assert deadline is not None and "SLO deadline +20 s" in svg
    ticks = {float(m[2]): float(m[1]) for m in
             re.finditer(r'<text x="([\d.]+)"[^>]*>\+?(-?[\d.]+) s</text>', svg)}
    assert abs(float(deadline[1]) - ticks[20.0]) < 0.2, "drawn at +20 s on the time axis"


def test_no_deadline_without_an_rto_objective() -> None:
    line = build_timeline(real_journal("silent-corruption"))
    assert line.slo_s is None and line.deadline is None
    assert "slo-deadline" not in timeline_svg(line)


def test_steady_state_probes_are_labelled_before_and_after() -> None:
    journal = real_journal("flagship")
    assert verifier_phases(journal) == ["before", "before", "", "", "after", "after"]
    names = [row[0] for row in verdict_table(journal)]
    assert "before: p99-latency-under-250ms (steady.http_latency_ok)" in names
    assert "after: predictions-match-golden (prediction_hash.matches_golden)" in names
    assert "recovered-within-rto (rto.measure_recovery)" in names
    svg = timeline_svg(build_timeline(journal))
    assert re.findall(r'class="phase"[^>]*>(\w+)</text>', svg) == ["before", "after"]
    markdown = render_markdown(journal, summarize(journal))
    assert "verifier (before): p99-latency-under-250ms ✓" in markdown
    assert "verifier (after): predictions-match-golden ✓" in markdown
    assert "| p99-latency-under-250ms p99 (after) | 5.46 ms | 250 ms | met |" in markdown


def test_each_measurement_has_its_own_axis_in_its_unit_from_zero() -> None:
    objectives = [Objective("RTO", 24.5, 20.0, "s"), Objective("p99", 5.4, 250.0, "ms"),
                  Objective("RPO", 40.0, None, "steps")]
    svg = objectives_svg(objectives)
    rows = re.findall(r'<g class="measurement">(.*?)</g>', svg)
    assert len(rows) == 3
    rto, p99, rpo = rows
    assert "missed by 4.5 s" in rto and "objective 20 s" in rto and ">24.5 s<" in rto
    assert re.findall(r">(0|\d+ s)</text>", rto)[:2] == ["0", "10 s"]
    assert ">met<" in p99 and "objective 250 ms" in p99 and ">5.4 ms<" in p99
    assert "300 ms" in p99 and " s<" not in p99
    assert "no objective" in rpo and "objective-mark" not in rpo and "steps" in rpo
    # the missed RTO's bar ends past its objective's mark; the met p99's well before it
    for row, past in ((rto, True), (p99, False)):
        bar = re.search(r'class="objective" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', row)
        mark = re.search(r'class="objective-mark" x1="([\d.]+)"', row)
        assert bar is not None and mark is not None
        assert (float(bar[1]) + float(bar[2]) > float(mark[1])) is past


def test_missed_by_and_numbers_read_as_a_person_writes_them() -> None:
    assert Objective("RTO", 24.5, 20.0, "s").verdict() == "missed by 4.5 s"
    assert Objective("RTO", 20.0, 20.0, "s").verdict() == "met"
    assert Objective("RPO", 3.0, None, "steps").verdict() == "no objective"
    assert [number(v) for v in (250, 1.204, 0.879, 20.0, 1250, 0)] == \
        ["250", "1.2", "0.879", "20", "1250", "0"]


def test_a_run_without_a_fault_gets_a_sentence_not_an_empty_chart() -> None:
    journal = _without_faults()
    summary = summarize(journal)
    page = render_html(journal, summary)
    assert 'class="chart timeline"' not in page
    assert "No fault was applied in this run" in page
    assert 'class="chart objectives"' in page  # the measurements still have their chart
    markdown = render_markdown(journal, summary)
    assert "No fault was applied in this run" in markdown and "| t (s) | event |" not in markdown


def test_a_fault_listed_but_never_applied_is_not_drawn_as_a_window() -> None:
    journal = copy.deepcopy(real_journal("flagship"))
    del journal["gameday"]["faults"][0]["applied_at"]
    line = build_timeline(journal)
    assert line.windows == [] and line.deadline is None
    assert "None of the 1 fault(s) this run lists was applied" in render_html(
        journal, summarize(journal))


def test_the_markdown_has_the_deadline_and_the_objectives() -> None:
    journal = varied(rto_s=24.5, passed=False)
    markdown = render_markdown(journal, summarize(journal))
    assert "| +20.00 | SLO deadline (onset + 20 s) |" in markdown
    assert "| RTO | 24.5 s | 20 s | missed by 4.5 s |" in markdown
    assert "| time to detect | 0.9 s | - | no objective |" in markdown
