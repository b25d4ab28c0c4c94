"""Every bench script runs in ``make bench`` and, at its smoke size, in ``make
bench-smoke``, which CI (``.ci/run``) runs: a bench added to bench/ without a place in
both fails here, and one that breaks fails the build."""

import re

from tests.packaging.extras import REPO


def _scripts() -> set[str]:
    """The bench scripts: the modules of bench/ that run as a program."""
    return {path.name for path in (REPO / "bench").glob("*.py")
            if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")}


def test_every_bench_is_in_make_bench_and_bench_smoke_and_ci_runs_the_smoke() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    bench = re.search(r"^bench: .*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    smoke = re.search(r"^SMOKE +:= ((?:.*\\\n)*.*)", makefile, re.MULTILINE)
    assert bench is not None and smoke is not None
    scripts = _scripts()
    assert len(scripts) >= 10
    assert set(re.findall(r"bench/(\w+\.py)", bench.group(1))) == scripts
    assert set(re.findall(r"bench/(\w+\.py)", smoke.group(1))) == scripts
    assert re.search(r"^bench-smoke: .*\n\t\$\(SMOKE\)$", makefile, re.MULTILINE)
    assert "make bench-smoke" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
