"""bench/gpu_check.py, the one-shot check for a lent GPU machine: it runs on the bare
system Python (no venv), prints skip lines and exits 0 on this machine (no GPU); against
the STAND-IN libcuda.so.1 and libnvidia-ml.so.1 (tests/node/conftest.py builds them) it
checks every NVML step through its ctypes reader (bench/nvml_ctypes.py) on the bare
Python and through pynvml on the venv's, and holds and releases gpu.oom; read
statically, neither it nor the reader calls an NVML setter/reset/clear, and it never
opens /dev/kmsg. What a real driver does is only seen by running it on a GPU machine."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.nvml_ctypes import is_read
from tests.conftest import REPO

SCRIPT = REPO / "bench" / "gpu_check.py"
READER = REPO / "bench" / "nvml_ctypes.py"
BARE = Path("/usr/bin/python3")
STEPS = ("environment", "nvml-reads", "bus-id", "context-cost", "gpu.oom", "xid-pattern",
         "dcgm", "snapshot")


def test_it_runs_on_the_bare_system_python_with_skips_and_exit_0(tmp_path: Path) -> None:
    python = Path("/usr/bin/python3")
    if not python.exists() or shutil.which("nvidia-smi"):
        pytest.skip("needs /usr/bin/python3 on a machine without a GPU")
    result = subprocess.run([str(python), "-I", str(SCRIPT)], cwd=tmp_path, text=True,
                            capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split()[1] for line in lines[:-1]] == list(STEPS)
    assert all(line.split()[2] in ("ok", "skip") for line in lines[:-1])
    assert "check gpu.oom skip " in result.stdout and "check xid-pattern ok " in result.stdout
    assert lines[-1].startswith("gpu_check: ok=1 fail=0 skip=7")


def _called_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else
                      func.id if isinstance(func, ast.Name) else "")
    return names


def test_it_calls_no_nvml_setter_and_never_opens_dev_kmsg() -> None:
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    called = _called_names(tree)
    changing = {name for name in called
                if re.match(r"(nvml\w*(Set|Reset|Clear)|set_|reset_|clear_)", name)}
    assert changing == set()
    strings = [arg.value for node in ast.walk(tree) if isinstance(node, ast.Call)
               for arg in ast.walk(node)
               if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    assert not any("/dev/kmsg" in text for text in strings)
    assert "write" not in called and "KernelLog" in called  # only a path never written
    # every hold is reverted in a finally
    finally_calls = {name for node in ast.walk(tree) if isinstance(node, ast.Try)
                     for stmt in node.finalbody for name in _called_names(stmt)}
    assert {"revert", "destroy_context"} <= finally_calls


def check_lines(python: Path | str, library_path: str, tmp_path: Path, *, shared: bool = True
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[str, str]]]:
    """Run the check with ``python`` on the stand-ins (``library_path``, as
    ``LD_LIBRARY_PATH``); ``shared``: the CUDA stand-in's memory shared between
    processes, as a real GPU's is."""
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": library_path}
    if shared:
        env["STANDIN_CUDA_SHARED"] = str(tmp_path / "cuda-used")
    result = subprocess.run([str(python), "-I", str(SCRIPT)], cwd=tmp_path, text=True,
                            capture_output=True, timeout=120, env=env)
    steps = {}
    for line in result.stdout.splitlines()[:-1]:
        _, name, outcome, figures = [*line.split(" ", 3), ""][:4]
        steps[name] = (outcome, figures)
    return result, steps


def test_it_checks_everything_through_ctypes_on_the_bare_python(standin_libs: Path,
                                                                tmp_path: Path) -> None:
    if not BARE.exists():
        pytest.skip("needs /usr/bin/python3")
    result, steps = check_lines(BARE, str(standin_libs), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(steps) == list(STEPS)
    outcome, figures = steps["environment"]
    assert outcome == "ok" and figures.startswith(
        "nvml=ctypes driver=550.54.15 cuda_driver=12.4 gpus=2 cuda=usable ")
    assert "'ecc': [5, 1], 'mig': False, 'compute': 0, 'persistence': True}" in figures
    assert "'ecc': [None, None], 'mig': False, 'compute': 0, 'persistence': False}" in figures
    assert steps["nvml-reads"] == ("ok", "gpu0:Stand-in H100 0:7168MiB-free:40C "
                                         "gpu1:Stand-in H100 1:7168MiB-free:41C")
    assert steps["bus-id"] == ("ok", "cuda_devices=[0, 1]")
    assert steps["context-cost"] == ("ok", "context_mib=0")
    held = 7 * 1024 - 256  # all CUDA sees free, less gpu.oom's margin
    assert steps["gpu.oom"] == ("ok", f"held_mib={held} context_mib=0 free_drop_mib={held} "
                                      "other_during='alloc-failed 2' other_after='alloc-ok' "
                                      "refused_used_delta_mib=0 used_delta_mib=0")
    assert steps["xid-pattern"][0] == "ok" and steps["dcgm"][0] == "skip"
    assert steps["snapshot"][0] == "ok"
    assert result.stdout.splitlines()[-1] == "gpu_check: ok=7 fail=0 skip=1"


def test_it_fails_gpu_oom_when_another_process_is_not_squeezed(standin_libs: Path,
                                                               tmp_path: Path) -> None:
    """A stand-in whose memory is per process: the other process gets its allocation
    while gpu.oom holds, so the step must fail and the check exit 1."""
    if not BARE.exists():
        pytest.skip("needs /usr/bin/python3")
    result, steps = check_lines(BARE, str(standin_libs), tmp_path, shared=False)
    assert result.returncode == 1
    assert steps["gpu.oom"][0] == "fail" and "other_during='alloc-ok'" in steps["gpu.oom"][1]
    assert result.stdout.splitlines()[-1] == "gpu_check: ok=6 fail=1 skip=1"


def test_it_reads_through_pynvml_where_it_imports(standin_libs: Path, tmp_path: Path) -> None:
    """The venv's Python has pynvml: the same figures through LibNvml, on the old
    driver's NVML too (the older call names)."""
    for libs in (standin_libs, standin_libs / "old-driver"):
        result, steps = check_lines(sys.executable, f"{libs}:{standin_libs}", tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert steps["environment"][1].startswith("nvml=pynvml driver=550.54.15 "
                                                  "cuda_driver=12.4 gpus=2 ")
        assert steps["nvml-reads"][1].endswith("7168MiB-free:41C")
        assert result.stdout.splitlines()[-1] == "gpu_check: ok=7 fail=0 skip=1"


def test_the_reader_looks_up_only_reads_and_its_setters_change_nothing(
        standin_libs: Path) -> None:
    """Statically: every NVML name in bench/nvml_ctypes.py is a read. Run on the bare
    Python against the stand-in: each setter raises and the power limit is unchanged."""
    tree = ast.parse(READER.read_text(encoding="utf-8"))
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and re.fullmatch(r"nvml\w+", node.value)}
    assert "nvmlDeviceGetPowerManagementLimit" in names
    assert [name for name in names if not is_read(name)] == []
    assert not is_read("nvmlDeviceSetPowerManagementLimit")
    assert not is_read("nvmlDeviceClearEccErrorCounts")
    script = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "from bench.nvml_ctypes import CtypesNvml, ReadOnly; nvml = CtypesNvml(); "
              "calls = [lambda: nvml.set_power_limit_mw(0, 200000), "
              "lambda: nvml.set_locked_clocks(0, 500, 500), "
              "lambda: nvml.reset_locked_clocks(0), "
              "lambda: nvml._call('nvmlDeviceSetPowerManagementLimit')]\n"
              "for call in calls:\n"
              "    try:\n        call()\n    except ReadOnly as exc:\n        print(exc)\n"
              "print(nvml.power_limit_mw(0), nvml.sm_clock_mhz(0))")
    python = str(BARE) if BARE.exists() else sys.executable
    result = subprocess.run([python, "-I", "-c", script, str(REPO)], text=True,
                            capture_output=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(standin_libs)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "set_power_limit_mw: this reader changes no GPU setting",
        "set_locked_clocks: this reader changes no GPU setting",
        "reset_locked_clocks: this reader changes no GPU setting",
        "nvmlDeviceSetPowerManagementLimit: not a read; this reader never calls it"]
    assert lines[4] == "(700000, 200000, 700000) (1755, 1980)"
