"""The chain head each run wrote is published with the metrics of results (what an
auditor records as an anchor): ``gameday_journal_sequence`` and ``gameday_journal_info``
with the journal's SHA-256, one series per experiment (its latest journal), written by
the real textfile writer from real hash-chained journals."""

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gameday.evidence import audit
from gameday.evidence.journal import read_head, write_journal
from gameday.evidence.summary import read_summary
from gameday.report.metrics import write_textfile
from tests.report.reports_helpers import varied


def test_the_head_is_in_the_metrics_and_anchors_the_audit(tmp_path: Path) -> None:
    directory = tmp_path / "journals"
    paths = [directory / f"2026110{n}T100000Z-ecc.json" for n in range(3)]
    for path in paths:
        write_journal(path, varied())
    metrics = tmp_path / "results.prom"
    write_textfile(metrics, [read_summary(path) for path in paths])
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text())}
    (sequence,) = families["gameday_journal_sequence"].samples
    (info,) = families["gameday_journal_info"].samples
    head = read_head(directory)
    assert head is not None
    assert (sequence.value, info.labels["sha256"], info.labels["journal"]) == (
        3, head.sha256, paths[-1].name)
    anchor = audit.Anchor(expect_head=info.labels["sha256"], min_sequence=int(sequence.value))
    assert audit.verify(directory, anchor=anchor).ok
    # a later run moves the head on: the anchor still holds; removing that run breaks it
    write_journal(directory / "20261109T100000Z-ecc.json", varied())
    assert audit.verify(directory, anchor=anchor).ok
    paths[-1].unlink()
    assert not audit.verify(directory, anchor=anchor).ok
