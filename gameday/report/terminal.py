"""The verdict table printed at the end of ``gameday run``."""

from typing import Any, TextIO


def _fmt_time(t: float | None, origin: float | None) -> str:
    if t is None:
        return "-"
    return f"+{t - origin:.2f}s" if origin else f"{t:.2f}"


def _verifier_row(result: dict[str, Any]) -> tuple[str, str, str]:
    m = result.get("measurement") or {}
    name = result.get("name") or result.get("verifier", "")
    if result.get("name") and result.get("verifier"):
        name = f"{result['name']} ({result['verifier']})"
    verdict = {True: "PASS", False: "FAIL", None: "info"}[result.get("passed")]
    detail = result.get("reason") or ""
    if not detail:
        if "rto_s" in m:
            slo = m.get("slo_s")
            detail = f"RTO {m['rto_s']:.2f} s" + (f" (SLO {slo:g} s)" if slo else "")
        elif "digest" in m:
            detail = f"sha256 {str(m['digest'])[:16]}…"
    return name, verdict, detail


def verdict_table(journal: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows of (what, verdict, detail) for a journal with its gameday section."""
    gd = journal.get("gameday") or {}
    rows: list[tuple[str, str, str]] = []
    states = journal.get("steady_states") or {}
    for phase in ("before", "after"):
        state = states.get(phase)
        if state is not None:
            met = state.get("steady_state_met")
            probes = len(state.get("probes") or [])
            rows.append((f"steady state {phase}", "PASS" if met else "FAIL", f"{probes} probes"))
    onset = min((f["applied_at"] for f in gd.get("faults") or []), default=None)
    for fault in gd.get("faults") or []:
        where = f"{fault.get('node')}/gpu{fault['target']['gpu']}" if "gpu" in fault.get(
            "target", {}) else fault.get("node", "")
        reverted = fault.get("reverted_at")
        detail = (f"{where} injected_at={fault.get('injected_at')} "
                  f"applied {_fmt_time(fault.get('applied_at'), onset)} "
                  f"reverted {_fmt_time(reverted, onset)} ({fault.get('revert_reason') or '-'})")
        rows.append((f"fault {fault.get('kind')}", "ok" if reverted else "ACTIVE", detail))
    for result in gd.get("verifiers") or []:
        rows.append(_verifier_row(result))
    verdict = gd.get("verdict") or {}
    rows.append(("run", "PASSED" if verdict.get("passed") else str(verdict.get("status",
                                                                            "")).upper(),
                 "; ".join(verdict.get("reasons") or []) or f"exit {verdict.get('exit_code')}"))
    return rows


def print_verdict(journal: dict[str, Any], out: TextIO) -> None:
    rows = verdict_table(journal)
    width = max(len(r[0]) for r in rows)
    print("", file=out)
    print(f"{'check'.ljust(width)}  verdict  detail", file=out)
    print(f"{'-' * width}  -------  ------", file=out)
    for what, verdict, detail in rows:
        print(f"{what.ljust(width)}  {verdict.ljust(7)}  {detail}", file=out)
