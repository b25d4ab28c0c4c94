"""The HTML report in a real headless browser (Debian's chromium): it renders with its
charts, and it makes no network request.

How "no request" is proven: chromium is driven over the DevTools protocol
(``--remote-debugging-pipe``) with the Network domain enabled on the page, so the
browser itself reports every request the page makes (``Network.requestWillBeSent``,
the same events DevTools' Network tab shows). A control page with one external image
must produce such an event (so the probe can see a request); the report must produce
none besides its own file:// document. The HTML is also checked statically: a CSP of
``default-src 'none'`` and no attribute or CSS that points anywhere. Chromium's own
background traffic (update checks, which are not the page's) goes to a recording sink
proxy on loopback, so nothing leaves the machine.
"""

import base64
import contextlib
import copy
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from gameday.evidence.journal import write_journal
from gameday.evidence.summary import summarize
from gameday.gamedays.costs import Fleet
from gameday.report.document import render_html
from tests.conftest import cli_env, gameday
from tests.report.reports_helpers import real_journal, varied

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian package chromium not installed")

URL_ATTRIBUTES = {"src", "href", "action", "srcset", "poster", "data", "xlink:href", "formaction",
                  "background", "ping", "manifest", "cite", "longdesc"}


class _SinkProxy:
    """Accepts connections on loopback and answers 502: chromium's traffic stays here."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        with contextlib.suppress(OSError):  # shutdown wakes accept(); close() alone does not
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self._thread.join(timeout=5)


class _Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, profile: Path, proxy_port: int) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # the DevTools pipe is fds 3 (commands) and 4 (replies)
            commands, replies = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.proc = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--proxy-server=http://127.0.0.1:{proxy_port}",
             "--proxy-bypass-list=<-loopback>", "about:blank"],
            preexec_fn=wire, close_fds=False,  # fds 3 and 4 must survive; the rest is CLOEXEC
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: bool = True) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                assert "error" not in reply, reply
                result: dict[str, Any] = reply.get("result") or {}
                return result
            self.events.append(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                self.events.remove(event)
                return event
        while True:
            event = self._read_message()
            if event.get("method") == method:
                return event
            self.events.append(event)

    def open(self, url: str, width: int | None = None) -> list[str]:
        """Load ``url`` in a fresh page (``width`` CSS pixels wide when given); return the
        URLs of every request it made."""
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call("Target.attachToTarget", {"targetId": target["targetId"],
                                                       "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.events.clear()
        if width is not None:
            self.call("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        self.call("Network.enable")
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", {"expression": "new Promise(r => setTimeout(r, 300))",
                                       "awaitPromise": True})
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True})
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        self.call("Emulation.setDeviceMetricsOverride", {"width": 1100, "height": 1400,
                                                         "deviceScaleFactor": 1,
                                                         "mobile": False})
        shot = self.call("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.call("Browser.close", session=False)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[_Browser]:
    sink = _SinkProxy()
    driver = _Browser(tmp_path / "profile", sink.port)
    try:
        yield driver
    finally:
        driver.close()
        sink.close()
    assert driver.proc.returncode is not None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.csp = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "meta" and (values.get("http-equiv") or "").lower() == \
                "content-security-policy":
            self.csp = values.get("content") or ""
        self.urls += [v for k, v in attrs if k in URL_ATTRIBUTES and v and not
                      v.startswith("#")]
        self.urls += re.findall(r"url\(([^)]*)\)", values.get("style") or "")


def test_report_renders_charts_and_fetches_nothing(tmp_path: Path, browser: _Browser) -> None:
    journal = real_journal("flagship")
    page = render_html(journal, summarize(journal, path="flagship.json", sha256="0" * 64),
                       Fleet(gpus=1024, stated=True))
    report = tmp_path / "report.html"
    report.write_text(page)

    links = _Links()
    links.feed(page)
    assert "default-src 'none'" in links.csp
    assert links.urls == [] and "url(" not in page and "<script" not in page
    assert "@import" not in page

    requests = browser.open(report.as_uri())
    assert requests == [report.as_uri()], requests
    assert browser.evaluate("document.querySelectorAll('svg').length") == 2
    assert browser.evaluate("document.querySelectorAll('svg rect.fault-window').length") == 1
    assert browser.evaluate("document.querySelectorAll('svg polyline.sli').length") == 1
    assert browser.evaluate("document.querySelector('svg g.rto') !== null") is True
    width = browser.evaluate("document.querySelector('svg.timeline').getBoundingClientRect()"
                             ".width")
    assert width > 600, "the timeline chart is laid out at a readable width"
    text = browser.evaluate("document.body.innerText")
    assert "RTO 1.20 s (SLO 20 s)" in text and "shard 0 → node-0/gpu3" in text
    assert "alert GpuDoubleBitEcc" in text and "GPU-hours lost" in text and "PASSED" in text
    assert "SLO deadline +20 s" in text
    assert "before: p99-latency-under-250ms (steady.http_latency_ok)" in text
    assert "after: predictions-match-golden (prediction_hash.matches_golden)" in text
    phases = browser.evaluate("[...document.querySelectorAll('svg.timeline text.phase')]"
                              ".map(t => t.textContent)")
    assert phases == ["before", "after"]
    deadline = browser.evaluate("(() => { const r = document.querySelector("
                                "'svg.timeline g.slo-deadline line').getBoundingClientRect();"
                                " return [r.height, r.left - document.querySelector("
                                "'svg.timeline').getBoundingClientRect().left]; })()")
    assert deadline[0] > 150 and deadline[1] > width / 2, "a tall line, right of the onset"
    rows = browser.evaluate("[...document.querySelectorAll('svg.objectives g.measurement')]"
                            ".map(g => g.textContent)")
    assert len(rows) == 5 and all("met" in row for row in rows[:2]), rows
    assert "objective 20 s" in rows[1] and "1.2 s" in rows[1] and "20 s" in rows[1]
    assert "p99 (before)" in rows[0] and "objective 250 ms" in rows[0]
    assert "no objective" in rows[2]
    shot = tmp_path / "report.png"
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    quiet = copy.deepcopy(journal)
    quiet["gameday"]["faults"] = []
    no_fault = tmp_path / "no-fault.html"
    no_fault.write_text(render_html(quiet, summarize(quiet, path="q.json", sha256="0" * 64)))
    assert browser.open(no_fault.as_uri()) == [no_fault.as_uri()]
    assert browser.evaluate("document.querySelector('svg.timeline') === null") is True
    assert "No fault was applied in this run" in browser.evaluate("document.body.innerText")
    assert browser.evaluate("document.querySelectorAll('svg.objectives g.measurement')"
                            ".length") == 5

    control = tmp_path / "control.html"
    control.write_text("<!doctype html><p>control</p>"
                       "<img src='http://gdrep-control.invalid/pixel.png'>")
    requests = browser.open(control.as_uri())
    assert "http://gdrep-control.invalid/pixel.png" in requests, requests


def _game_day(directory: Path) -> Path:
    """Two journals of a game day and its run record, as ``gameday play`` writes them."""
    runs = []
    for name, rto in (("ecc", 1.2), ("oom", 24.5)):
        journal = directory / f"20261101T1000{len(runs)}0Z-{name}.json"
        write_journal(journal, varied(rto_s=rto, passed=rto < 20,
                                      experiment=f"experiments/{name}.yaml"))
        runs.append({"name": name, "experiment": f"experiments/{name}.yaml", "expect": "pass",
                     "outcome": "passed" if rto < 20 else "failed", "as_expected": rto < 20,
                     "journal": str(journal), "exit_code": 0 if rto < 20 else 1})
    record = directory / "20261101T100000Z-weekly.playbook.json"
    write_journal(record, {"playbook": "playbooks/weekly-gameday.yaml", "title": "weekly",
                           "started_at": 1_793_000_000.0, "ended_at": 1_793_000_300.0,
                           "exit_code": 1, "runs": runs})
    return record


def test_matrix_and_game_day_report_render_and_fetch_nothing(tmp_path: Path,
                                                             browser: _Browser) -> None:
    record = _game_day(tmp_path / "journals")
    result = gameday(["report", str(record)], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    page = record.with_name("20261101T100000Z-weekly.html")
    assert f"wrote {page}" in result.stderr
    matrix = tmp_path / "coverage.html"
    result = gameday(["coverage", str(tmp_path / "journals"), "--format", "html", "-o",
                      str(matrix)], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    for html_page in (page, matrix):
        links = _Links()
        links.feed(html_page.read_text())
        assert "default-src 'none'" in links.csp and "<script" not in html_page.read_text()
        assert browser.open(html_page.as_uri()) == [html_page.as_uri()]
        shot = tmp_path / f"{html_page.stem}.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 10_000
    browser.open(page.as_uri())
    text = browser.evaluate("document.body.innerText")
    assert "weekly" in text and "FAILED" in text and "24.50 s (SLO 20 s)" in text
    assert browser.evaluate("document.querySelectorAll('svg rect.objective').length") == 2
    browser.open(matrix.as_uri())
    text = browser.evaluate("document.body.innerText")
    assert "Verified scenarios by fault family" in text and "GPU ECC error" in text
    assert "not covered yet" in text and "cannot act at this layer" in text
    assert browser.evaluate("getComputedStyle(document.querySelector('td code')).whiteSpace"
                            ) == "nowrap"


_CELLS = [("gpu.ecc", "device"), ("node.cpu_hog", "node"), ("process.kill", "container"),
          ("service.latency", "service"), ("net.loss", "network"),
          ("storage.errors", "storage")]


def _audit(directory: Path) -> tuple[Path, Path, list[Path]]:
    """Six journals (one per layer), a requirement file naming their six cells, and a run
    record; only the first run's own report is rendered (``gameday report JOURNAL``)."""
    directory.mkdir(parents=True)
    journals, runs = [], []
    for position, (fault, layer) in enumerate(_CELLS):
        journal = directory / f"20261101T10000{position}Z-{fault.replace('.', '-')}.json"
        write_journal(journal, varied(fault=fault, layer=layer, rto_s=1.2 + position,
                                      experiment=f"experiments/{fault}.yaml"))
        journals.append(journal)
        runs.append({"name": fault, "experiment": f"experiments/{fault}.yaml",
                     "expect": "pass", "outcome": "passed", "as_expected": True,
                     "journal": str(journal), "exit_code": 0})
    record = directory / "20261101T100000Z-audit.playbook.json"
    write_journal(record, {"playbook": "playbooks/audit-coverage.yaml", "title": "audit",
                           "started_at": 1_793_000_000.0, "ended_at": 1_793_000_300.0,
                           "exit_code": 0, "runs": runs})
    required = directory.parent / "require.yaml"
    required.write_text("coverage:\n  require:\n" + "".join(
        f"    - {{fault: {fault}, layer: {layer}}}\n" for fault, layer in _CELLS))
    return record, required, journals


def _contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of two computed ``rgb(...)`` colours."""
    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", colour)[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
                  for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_coverage_page_says_what_is_met_shows_its_swatches_and_fits_1400px(
        tmp_path: Path, browser: _Browser) -> None:
    """The verdict counts met cells; `·` and `—` are readable and explained by a legend
    showing the same swatch; no table pushes the page wider than a 1400 px window (nor a
    900 px one: the wide tables scroll inside their box); every run link opens a file that
    exists, the run report where one was rendered, else the journal, labelled as such."""
    record, required, journals = _audit(tmp_path / "journals")
    env = cli_env(tmp_path)
    assert gameday(["report", str(journals[0])], env).returncode == 0
    matrix = tmp_path / "coverage.html"
    result = gameday(["coverage", str(tmp_path / "journals"), "--format", "html", "-o",
                      str(matrix), "--require", str(required)], env)
    assert result.returncode == 0, result.stderr
    assert "coverage: 6 of 6 required cells met\n" in result.stderr
    assert browser.open(matrix.as_uri(), width=1400) == [matrix.as_uri()]
    text = browser.evaluate("document.body.innerText")
    verdict = browser.evaluate("document.querySelector('p.verdict').innerText")
    assert verdict == "6 of 6 required cells met" and "0 of 6" not in text
    for klass, mark in (("none", "·"), ("na", "—")):
        cell, swatch = browser.evaluate(
            f"[...['table td.{klass}', 'dl.legend dt.{klass}']].map(s => {{"
            " const e = document.querySelector(s), c = getComputedStyle(e);"
            " return [e.textContent, c.color, c.backgroundColor, c.backgroundImage]; })")
        assert cell == swatch, "the legend shows the cell's own swatch"
        assert cell[0] == mark
        assert _contrast(cell[1], "rgb(255, 255, 255)") >= 4.5, cell
        assert _contrast(cell[1], "rgb(223, 227, 234)") >= 4.5, cell  # the hatch's stripe
    assert browser.evaluate("getComputedStyle(document.querySelector('td.na'))"
                            ".backgroundImage").startswith("repeating-linear-gradient")
    overflow = ("[document.documentElement.scrollWidth, window.innerWidth, "
                "[...document.querySelectorAll('table')].filter(t => "
                "t.closest('div.scroll') === null && t.scrollWidth > window.innerWidth)"
                ".length]")
    page_width, window_width, loose = browser.evaluate(overflow)
    assert window_width == 1400 and page_width <= window_width and loose == 0
    assert browser.evaluate("[...document.querySelectorAll('div.scroll')].map(d => "
                            "getComputedStyle(d).overflowX)") == ["auto", "auto"]
    browser.open(matrix.as_uri(), width=900)
    page_width, window_width, _ = browser.evaluate(overflow)
    assert window_width == 900 and page_width <= window_width, "the boxes scroll instead"
    links = browser.evaluate("[...document.querySelectorAll('table.cells td.runs a')].map(a =>"
                             " [a.href, a.textContent, a.parentElement.textContent])")
    assert len(links) == 6
    for href, label, cell in links:
        opened = Path(href.removeprefix("file://"))
        assert opened.is_file() and label == opened.name, href
        assert (opened.suffix, "(run report)" in cell) in ((".html", True), (".json", False))
        assert opened.suffix == ".json" or opened == journals[0].with_suffix(".html")
    assert sum(href.endswith(".html") for href, _, _ in links) == 1

    assert gameday(["report", str(record)], env).returncode == 0
    page = record.with_name("20261101T100000Z-audit.html")
    browser.open(page.as_uri(), width=1400)
    runs = browser.evaluate("[...document.querySelectorAll('table a')].map(a => "
                            "[a.getAttribute('href'), a.textContent])")
    assert len(runs) == 6
    for href, label in runs:
        assert (page.parent / href).is_file(), href
        assert label == f"{href} ({'run report' if href.endswith('.html') else 'journal'})"
    assert runs[0][0] == journals[0].with_suffix(".html").name


def test_coverage_wording_counts_unmet_cells_only_when_some_are(tmp_path: Path) -> None:
    from gameday.gamedays import coverage
    from gameday.gamedays.playbook import load_requirements

    _, required, journals = _audit(tmp_path / "journals")
    journals[0].unlink()  # its cell is now missing (and the chain names the gap)
    matrix = coverage.build(tmp_path / "journals")
    matrix.check(load_requirements(required))
    page, markdown = coverage.to_html(matrix), coverage.to_markdown(matrix)
    assert "<b>5 of 6 required cells met, 1 unmet</b>" in page
    assert "missing: gpu.ecc at device level" in page
    assert "**5 of 6 required cells met, 1 unmet**" in markdown


def _crowded() -> dict[str, Any]:
    """The flagship journal with its events crowded: detection and three moves within a
    second of each other, the last just before the 20 s SLO deadline."""
    journal = real_journal("flagship")
    onset = journal["gameday"]["faults"][0]["applied_at"]
    for result in journal["gameday"]["verifiers"]:
        if result["verifier"] == "reshard.verify_reshard":
            measurement = result["measurement"]
            measurement["detected_at"] = onset + 0.3
            measurement["moves"] = [
                {"at": onset + at, "shard": shard, "to": f"node-1/gpu{shard}"}
                for at, shard in ((0.5, 0), (0.7, 1), (0.9, 2), (19.4, 3))]
    return journal


_OVERLAPS = """(() => {
  const svg = document.querySelector('svg.timeline');
  const box = e => e.getBoundingClientRect();
  const meets = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom &&
                          b.top < a.bottom;
  const lines = [...svg.querySelectorAll('line.guide, g.slo-deadline line')];
  const texts = [...svg.querySelectorAll('text')];
  const crossed = [];
  for (const line of lines) for (const text of texts)
    if (meets(box(line), box(text))) crossed.push(text.textContent);
  const overlapping = list => list.filter((b, i) => list.some((o, j) => j !== i &&
                                                              meets(b, o))).length;
  return [lines.length, crossed,
          overlapping([...svg.querySelectorAll('g.verifier rect')].map(box)),
          overlapping([...svg.querySelectorAll('text.event-label')].map(box))];
})()"""


@pytest.mark.parametrize("journal", [real_journal("flagship"), _crowded()],
                         ids=["flagship", "crowded"])
def test_timeline_lines_cross_no_label_and_a_legend_names_every_mark(
        tmp_path: Path, browser: _Browser, journal: dict[str, Any]) -> None:
    """No dotted guide nor the SLO deadline crosses any label of the chart, no event
    label overlaps another (the crowded run needs more lanes and puts the label next to
    the deadline on its left), verifier boxes do not hide each other, and the legend
    explains every mark, `•` included."""
    report = tmp_path / "report.html"
    report.write_text(render_html(journal, summarize(journal, path="j.json", sha256="0" * 64)))
    browser.open(report.as_uri(), width=1400)
    lines, crossed, stacked, overlapping = browser.evaluate(_OVERLAPS)
    events = browser.evaluate("document.querySelectorAll('svg.timeline circle.event').length")
    assert lines == events + 1 and events >= 4
    assert crossed == [] and stacked == 0 and overlapping == 0
    legend = browser.evaluate("[...document.querySelectorAll('svg.timeline g.legend-item')]"
                              ".map(g => g.textContent)")
    for mark in ("fault active", "SLI up / down", "RTO: onset to recovery", "SLO deadline",
                 "when an event happened", "fault injected", "SLI went down", "alert fired",
                 "shard moved", "throughput back to pace", "✓verifier passed", "✗failed",
                 "•recorded without a verdict"):
        assert any(item.startswith(mark) for item in legend), (mark, legend)
    marks = browser.evaluate("[...document.querySelectorAll('svg.timeline g.verifier text')]"
                             ".map(t => t.textContent)")
    assert "•" in marks and "✓" in marks
    hidden = browser.evaluate(
        "(() => { const svg = document.querySelector('svg.timeline').getBoundingClientRect();"
        " return [...document.querySelectorAll('svg.timeline text')].filter(t => {"
        " const r = t.getBoundingClientRect(); return r.left < svg.left - 1 ||"
        " r.right > svg.right + 1; }).map(t => t.textContent); })()")
    assert hidden == []
    browser.screenshot(tmp_path / "timeline.png")


def test_a_slowdown_is_drawn_against_its_objectives(tmp_path: Path, browser: _Browser) -> None:
    """A real DDP run under net.latency (tests/report/data/ddp-latency-journal.json): the
    moment the job was back to pace is on the timeline, the slowdown is a bar against
    its objective (73% against at most 95%), and the goodput is in the cost section."""
    journal = real_journal("ddp-latency")
    report = tmp_path / "report.html"
    report.write_text(render_html(journal, summarize(journal, path="j.json", sha256="0" * 64)))
    browser.open(report.as_uri(), width=1400)
    events = browser.evaluate("[...document.querySelectorAll('svg.timeline circle.event')]"
                              ".map(c => c.getAttribute('class'))")
    assert "event recovered" in events and "event fault" in events
    labels = browser.evaluate("[...document.querySelectorAll('svg.objectives text')]"
                              ".map(t => t.textContent).join(' ')")
    assert "throughput-cost slowdown" in labels and "95" in labels
    text = browser.evaluate("document.body.innerText")
    assert "Goodput during the fault: 27% of the baseline rate" in text
    assert "no measurement with an objective" not in text
    browser.screenshot(tmp_path / "slowdown.png")
