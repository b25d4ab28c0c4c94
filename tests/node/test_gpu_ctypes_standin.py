"""gameday's real bindings to the CUDA driver (ctypes) and NVML (pynvml) and its DCGM
client, run against STAND-INS: small C implementations of ``libcuda.so.1`` and
``libnvidia-ml.so.1`` (tests/node/gpu_standin/*.c) compiled by tests/node/conftest.py with
the C compiler (the NVML one also as an older driver's, without the current calls), and
stand-in DCGM Python bindings (tests/node/gpu_standin/dcgm_bindings/, the module and
function names of DCGM's own). pynvml loads the stand-in as it loads the driver's
library, by name through ``LD_LIBRARY_PATH``. They check argument passing, structures,
error mapping and context handling of the real code; what a real driver and DCGM do is
checked by bench/gpu_check.py on a GPU machine. Everything runs in subprocesses, so the
stand-ins never load into the test process."""

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.node.conftest import SOURCES

GIB = 1 << 30


def run_with(libs: Path, *args: str, dcgm: bool = False, dcgm_test_bindings: bool = True,
             extra_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run python with the stand-in libraries; ``dcgm``: with DCGM's public bindings (a
    standard install's), and its test bindings unless ``dcgm_test_bindings`` is False;
    ``extra_env``: set for the stand-ins (``CUDA_VISIBLE_DEVICES``, ``STANDIN_*``)."""
    path = [str(REPO)] + ([str(SOURCES / "dcgm_bindings")] if dcgm else []) + (
        [str(SOURCES / "dcgm_test_bindings")] if dcgm and dcgm_test_bindings else [])
    env = {**{k: v for k, v in os.environ.items()
              if k != "CUDA_VISIBLE_DEVICES" and not k.startswith("STANDIN_")},
           **(extra_env or {}), "LD_LIBRARY_PATH": str(libs),
           "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def seen(standin_libs: Path) -> dict[str, Any]:
    result = run_with(standin_libs, str(SOURCES / "exercise.py"), dcgm=True)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_nvml_reads_through_ctypes(seen: dict[str, Any]) -> None:
    assert seen["unavailable"] == [None, None]
    gpu0, gpu1 = seen["gpus"]
    assert gpu0["name"] == "Stand-in H100 0" and gpu0["pci_bus_id"] == "00000000:18:00.0"
    assert gpu0["uuid"].endswith("000000000000") and gpu1["uuid"].endswith("000000000001")
    assert (gpu0["memory_total"], gpu0["memory_used"]) == (8 * GIB, GIB)
    assert (gpu0["temperature_c"], gpu1["temperature_c"]) == (40, 41)
    assert (gpu0["sm_clock_mhz"], gpu0["max_sm_clock_mhz"]) == (1755, 1980)
    assert (gpu0["ecc_corrected"], gpu0["ecc_uncorrected"]) == (5, 1)
    assert gpu1["ecc_corrected"] is None and gpu0["clocks_event_reasons"] == 1
    assert seen["not_supported"] == "nvmlDeviceSetGpuLockedClocks: Not Supported"


def test_nvml_falls_back_to_the_old_calls_only_on_an_old_driver(standin_libs: Path) -> None:
    script = ("import json; from gameday.node.host.nvml import LibNvml; nvml = LibNvml(); "
              "print(json.dumps([nvml.unavailable(), nvml.temperature_c(1), "
              "nvml.clocks_event_reasons(0)]))")
    old = run_with(standin_libs / "old-driver", "-c", script)
    assert old.returncode == 0, old.stderr
    assert json.loads(old.stdout) == [None, 41, 1]  # ...Temperature, ...ThrottleReasons


def test_cuda_holds_and_frees_through_ctypes_leaving_no_context(seen: dict[str, Any]) -> None:
    held, chunks, used1, used0, nvml_used = seen["held"]
    assert (held, chunks, used1, used0) == (3 * GIB + 1, 4, 3 * GIB + 1, 0)
    assert nvml_used == GIB + 3 * GIB + 1
    assert seen["context_depth_while_held"] == 0  # no context left current on the thread
    assert seen["after_release"] == [0, 0, 0]
    assert "cannot hold 9663676416 bytes: 7516192768 of 8589934592" in seen["refused"]
    assert seen["after_refusal"] == [0, 0]
    assert seen["bad_device"] == "cuDeviceGetByPCIBusId: CUDA_ERROR_INVALID_VALUE"


def test_host_handlers_over_the_ctypes_bindings(seen: dict[str, Any]) -> None:
    assert seen["kinds"]["gpu.oom"] == "device" and seen["kinds"]["gpu.thermal"] == "telemetry"
    assert [g["pci_bus_id"] for g in seen["inventory"]] == ["00000000:18:00.0",
                                                           "00000000:28:00.0"]
    half = (7 * GIB - (256 << 20)) // 2  # half of what CUDA sees free, less the margin
    assert seen["oom"] == [half, GIB + half]
    assert seen["oom_reverted"] == GIB
    assert seen["thermal0"] == ["power_limit", [1755, 200000], [1755, 700000]]
    assert seen["thermal1"] == ["power_limit", [1755, 200000], [1755, 700000]]
    assert seen["kmsg"].startswith("<3>NVRM: Xid (PCI:0000:28:00): 43, ")


def test_dcgm_injection_through_the_bindings(seen: dict[str, Any]) -> None:
    assert seen["dcgm_unavailable"] is None
    dcgm = seen["dcgm"]
    assert dcgm["connected"] is True
    assert (dcgm["xid_during"], dcgm["xid_after"]) == (43, 0)  # GPU 1 is DCGM's GPU 9
    assert (dcgm["fall_off_bus"], dcgm["fall_off_bus_during"]) == (
        "telemetry (DCGM cache only)", 79)
    assert (dcgm["sbe_during"], dcgm["sbe_after"]) == (6, 4)
    assert dcgm["thermal_during"] == [97, 0x20, 990]
    assert dcgm["thermal_after"] == [0, 0, 0]


def test_dcgm_with_only_the_public_bindings_says_injection_needs_the_test_ones(
        standin_libs: Path) -> None:
    """A standard DCGM install: pydcgm, dcgm_agent, dcgm_structs, dcgm_fields only."""
    script = ("from gameday.node.host.dcgm import PyDcgm; print(PyDcgm().unavailable())")
    result = run_with(standin_libs, "-c", script, dcgm=True, dcgm_test_bindings=False)
    assert result.returncode == 0, result.stderr
    assert "only in DCGM's test bindings (dcgm_agent_internal" in result.stdout


#: Builds the host's GPU handlers on the ctypes bindings over the stand-ins and prints,
#: as JSON, whether gpu.oom is offered, why not, and what applying it on each GPU did.
OOM_SCRIPT = """
import ctypes, json, tempfile
from pathlib import Path
from gameday.agent.policy import Policy
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.backend import HostBackend
from gameday.node.host.cuda import LibCuda
from gameday.node.host.dcgm import PyDcgm
from gameday.node.host.gpu import GpuHost, gpu_handlers
from gameday.node.host.kmsg import KernelLog
from gameday.node.host.nvml import LibNvml
standin = ctypes.CDLL("libcuda.so.1")
standin.standin_used.restype = ctypes.c_size_t
host = GpuHost(nvml=LibNvml(), cuda=LibCuda(), dcgm=PyDcgm(),
               kmsg=KernelLog(str(Path(tempfile.mkdtemp()) / "kmsg")), node="standin")
backend = HostBackend("standin", gpu_handlers(host))
backend.use_policy(Policy(kinds=frozenset({"gpu.oom"})))
seen = {"offered": "gpu.oom" in backend.kinds(),
        "reason": backend.capabilities()["gpu.oom"], "gpus": []}
for gpu in (0, 1):
    request = FaultRequest("gpu.oom", {"gpu": gpu}, {"size_bytes": 1 << 30})
    try:
        outcome = backend.apply(f"o{gpu}", request)["held_bytes"]
    except FaultRejected as exc:
        outcome = str(exc)
    seen["gpus"].append([outcome, standin.standin_used(0), standin.standin_used(1),
                         standin.standin_live_contexts()])
    backend.revert(f"o{gpu}", request)
print(json.dumps(seen))
"""


def oom_on_standins(libs: Path, **env: str) -> dict[str, Any]:
    result = run_with(libs, "-c", OOM_SCRIPT, extra_env=env)
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout)
    return seen


def test_gpu_oom_skips_what_cuda_visible_devices_hides(standin_libs: Path) -> None:
    """CUDA_VISIBLE_DEVICES=1 to the stand-in driver: NVML's GPU 0 has no CUDA device
    (refused, no context made), NVML's GPU 1 is CUDA's ordinal 0, found by PCI bus id."""
    seen = oom_on_standins(standin_libs, CUDA_VISIBLE_DEVICES="1")
    assert seen["offered"] is True and seen["reason"] is None
    refused, held = seen["gpus"]
    assert refused[0].startswith("gpu.oom: the agent's CUDA cannot see GPU 0 "
                                 "(cuDeviceGetByPCIBusId: CUDA_ERROR_INVALID_DEVICE; "
                                 "CUDA_VISIBLE_DEVICES?)")
    assert refused[1:] == [0, 0, 0]
    assert held == [GIB, 0, GIB, 1]  # held on the physical GPU 1, while it lasted


@pytest.mark.parametrize(("env", "why"), [
    ({"STANDIN_MIG_GPUS": "0,1"}, "GPU 0 has MIG enabled"),
    ({"STANDIN_COMPUTE_MODE": "3"}, "GPU 0 is in exclusive-process compute mode"),
    ({"STANDIN_COMPUTE_MODE": "2"}, "GPU 0 is in prohibited compute mode"),
    ({"STANDIN_MIG_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"}, "GPU 0 has MIG enabled"),
])
def test_gpu_oom_is_not_offered_when_no_gpu_can_be_held(standin_libs: Path,
                                                        env: dict[str, str], why: str) -> None:
    """Through pynvml and ctypes on the stand-ins: MIG, a compute mode that does not share,
    or a GPU hidden from CUDA on every GPU: the kind is not offered, says why, and
    nothing is allocated on either GPU."""
    seen = oom_on_standins(standin_libs, **env)
    assert seen["offered"] is False
    assert seen["reason"].startswith(f"no GPU here can be held: {why}")
    for outcome, used0, used1, contexts in seen["gpus"]:
        assert outcome.startswith("gpu.oom cannot be applied on this host: no GPU here")
        assert (used0, used1, contexts) == (0, 0, 0)
