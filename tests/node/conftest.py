"""The STAND-IN ``libcuda.so.1`` and ``libnvidia-ml.so.1`` (tests/node/gpu_standin/*.c),
compiled once per session with the C compiler, the NVML one also as an older driver's
(in ``old-driver/``); a test points ``LD_LIBRARY_PATH`` at the directory."""

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCES = Path(__file__).parent / "gpu_standin"


@pytest.fixture(scope="session")
def standin_libs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in CUDA and NVML libraries")
    directory = tmp_path_factory.mktemp("gdgpu-libs")
    (directory / "old-driver").mkdir()
    for source, name, extra in (
            ("libcuda_standin.c", "libcuda.so.1", []),
            ("libnvml_standin.c", "libnvidia-ml.so.1", ["-ldl"]),
            ("libnvml_standin.c", "old-driver/libnvidia-ml.so.1",
             ["-ldl", "-DSTANDIN_OLD_DRIVER"])):
        subprocess.run([compiler, "-shared", "-fPIC", "-Wall",
                        f"-Wl,-soname,{Path(name).name}", "-o", str(directory / name),
                        str(SOURCES / source), *extra],
                       check=True, capture_output=True, timeout=60)
    yield directory
