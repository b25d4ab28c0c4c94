"""DCGM field injection: faults only the monitoring pipeline sees (``injected_at: telemetry``).

DCGM can be told a field's value (``dcgmInjectFieldValue``, the API DCGM's own tests
use): clients of that host engine (health watches, policies, a dcgm-exporter connected
to it) then see it as if the GPU had reported it. :class:`DcgmFields` is the seam;
:class:`PyDcgm` implements it with DCGM's Python bindings. A standard DCGM install puts
only the public ones (``pydcgm``, ``dcgm_agent``, ``dcgm_structs``, ``dcgm_fields``) in
its ``bindings/python3`` directory (e.g.
``/usr/share/datacenter-gpu-manager-4/bindings/python3``; put it on ``PYTHONPATH``):
they list GPUs and read fields. Injection exists only in DCGM's test bindings
(``dcgm_agent_internal``, ``dcgm_structs_internal``, from DCGM's test package); without
them :meth:`PyDcgm.unavailable` says exactly that, and every DCGM-based fault is refused.

The host engine is ``$GAMEDAY_DCGM_HOSTENGINE`` (default ``127.0.0.1``, port 5555). A
dcgm-exporter running its own embedded engine (its default) never sees what is injected
into ``nv-hostengine``: start it with ``-r HOST:5555`` (remote-hostengine mode) so it reads
the engine the agent injects into. :class:`ExporterView` (``$GAMEDAY_DCGM_EXPORTER_URL``,
its ``/metrics``) checks at apply time that the value is visible there, where an
experiment's probes look; a fault whose value is not seen says its layer is
``telemetry (DCGM cache only)``.

DCGM keeps sampling real GPUs, so a live field would soon be overwritten by the next
real sample: :class:`HeldInjection` re-injects its values every ``refresh_s`` while
the fault lasts and, on release, injects the values from before.
"""

import importlib
import os
import re
import threading
import time
import urllib.request
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final, Protocol

__all__ = ["CACHE_ONLY", "EXPORTER_NAMES", "FIELDS", "DcgmError", "DcgmFields",
           "ExporterView", "HeldInjection", "PyDcgm", "exporter_view_from_env"]

#: The DCGM field ids gameday injects.
FIELDS: Final = {
    "DCGM_FI_DEV_SM_CLOCK": 100,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 112,
    "DCGM_FI_DEV_GPU_TEMP": 150,
    "DCGM_FI_DEV_XID_ERRORS": 230,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 310,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 311,
}
#: The metric name dcgm-exporter gives each field (its counters CSV names fields so).
EXPORTER_NAMES: Final = {number: name for name, number in FIELDS.items()}
#: The injection layer of a DCGM value that the probes' exporter does not show.
CACHE_ONLY: Final = "telemetry (DCGM cache only)"
_BLANK_INT64: Final = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_BLANK and above: no value
_PUBLIC: Final = ("pydcgm", "dcgm_structs", "dcgm_fields", "dcgm_agent")
_TEST_ONLY: Final = ("dcgm_agent_internal", "dcgm_structs_internal")
_DCGM_FE_GPU: Final = 1  # dcgm_fields.DCGM_FE_GPU
HOSTENGINE_ENV: Final = "GAMEDAY_DCGM_HOSTENGINE"
EXPORTER_URL_ENV: Final = "GAMEDAY_DCGM_EXPORTER_URL"
EXPORTER_WAIT_ENV: Final = "GAMEDAY_DCGM_EXPORTER_WAIT_S"
_SAMPLE: Final = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}\s+(\S+)")
_LABEL: Final = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class DcgmError(Exception):
    """A DCGM call failed (one line)."""


class DcgmFields(Protocol):
    """Read and inject integer fields of GPUs known to DCGM."""

    def unavailable(self) -> str | None: ...

    def gpu_id(self, uuid: str) -> int:
        """DCGM's id of the GPU with this UUID; :class:`DcgmError` if DCGM has none."""
        ...

    def latest(self, gpu_id: int, field_id: int) -> int | None: ...

    def inject(self, gpu_id: int, field_id: int, value: int) -> None: ...


class HeldInjection:
    """Field values injected for one GPU and held until :meth:`release`."""

    def __init__(self, dcgm: DcgmFields, gpu_id: int, values: Mapping[int, int], *,
                 refresh_s: float = 1.0) -> None:
        self.dcgm = dcgm
        self.gpu_id = gpu_id
        self.values = dict(values)
        self.refresh_s = refresh_s
        self.before = {field: dcgm.latest(gpu_id, field) for field in self.values}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inject_all()  # errors here reach the caller: nothing is held then
        if refresh_s > 0:
            self._thread = threading.Thread(target=self._refresh, daemon=True,
                                            name=f"dcgm-hold-{gpu_id}")
            self._thread.start()

    def _inject_all(self) -> None:
        for field, value in self.values.items():
            self.dcgm.inject(self.gpu_id, field, value)

    def _refresh(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self._inject_all()
            except DcgmError:
                continue

    def release(self) -> None:
        """Stop holding and inject the values from before (0 where there was none)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for field, value in self.before.items():
            self.dcgm.inject(self.gpu_id, field, 0 if value is None else value)


class PyDcgm:
    """:class:`DcgmFields` on DCGM's Python bindings and its host engine.

    Importing the bindings is tried once; :meth:`unavailable` says why DCGM cannot be
    used. The host engine is connected on first use.
    """

    def __init__(self, host: str | None = None) -> None:
        self.host = host or os.environ.get(HOSTENGINE_ENV) or "127.0.0.1"
        self._modules: dict[str, ModuleType] = {}
        self._reason: str | None = None
        self._handle: Any = None
        self._lock = threading.Lock()
        try:
            for name in _PUBLIC:
                self._modules[name] = importlib.import_module(name)
        except Exception as exc:  # the bindings load libdcgm.so at import time
            self._reason = (f"DCGM's Python bindings are not importable ({exc}); install DCGM "
                            "and put its bindings/python3 directory on PYTHONPATH")
            return
        try:
            for name in _TEST_ONLY:
                self._modules[name] = importlib.import_module(name)
        except ImportError as exc:
            self._reason = (f"DCGM field injection is only in DCGM's test bindings "
                            f"({', '.join(_TEST_ONLY)}, from its test package), not in a "
                            f"standard install's public ones ({exc})")

    def unavailable(self) -> str | None:
        return self._reason

    def _connected(self) -> Any:
        if self._reason is not None:
            raise DcgmError(self._reason)
        with self._lock:
            if self._handle is None:
                try:
                    self._handle = self._modules["pydcgm"].DcgmHandle(ipAddress=self.host)
                except Exception as exc:
                    raise DcgmError(f"cannot connect to nv-hostengine at {self.host}: "
                                    f"{exc}") from None
            return self._handle.handle

    def gpu_id(self, uuid: str) -> int:
        handle = self._connected()
        agent = self._modules["dcgm_agent"]
        try:
            for gpu_id in agent.dcgmGetAllSupportedDevices(handle):
                found = agent.dcgmGetDeviceAttributes(handle, gpu_id).identifiers.uuid
                text = found.decode() if isinstance(found, bytes) else str(found)
                if text == uuid:
                    return int(gpu_id)
        except Exception as exc:
            raise DcgmError(f"DCGM cannot list its GPUs: {exc}") from None
        raise DcgmError(f"DCGM knows no GPU {uuid}")

    def latest(self, gpu_id: int, field_id: int) -> int | None:
        handle = self._connected()
        try:
            [value] = self._modules["dcgm_agent"].dcgmEntityGetLatestValues(
                handle, _DCGM_FE_GPU, gpu_id, [field_id])
        except Exception as exc:
            raise DcgmError(f"DCGM cannot read field {field_id}: {exc}") from None
        number = int(value.value.i64)
        return None if value.status != 0 or number >= _BLANK_INT64 else number

    def inject(self, gpu_id: int, field_id: int, value: int) -> None:
        handle = self._connected()
        internal = self._modules["dcgm_structs_internal"]
        field = internal.c_dcgmInjectFieldValue_v1()
        field.version = internal.dcgmInjectFieldValue_version1
        field.fieldId = field_id
        field.status = 0
        field.fieldType = ord(self._modules["dcgm_fields"].DCGM_FT_INT64)
        field.ts = int(time.time() * 1_000_000)
        field.value.i64 = int(value)
        try:
            self._modules["dcgm_agent_internal"].dcgmInjectFieldValue(handle, gpu_id, field)
        except Exception as exc:
            raise DcgmError(f"DCGM refused to inject field {field_id}={value}: {exc}") from None


class ExporterView:
    """What a dcgm-exporter's ``/metrics`` at ``url`` shows: whether an injected value
    reached the exporter the experiment's probes read (polled for up to ``wait_s``;
    dcgm-exporter collects every 30 s by default, ``-c`` to change)."""

    def __init__(self, url: str, *, wait_s: float = 5.0, poll_s: float = 0.5) -> None:
        self.url = url
        self.wait_s = wait_s
        self.poll_s = poll_s

    def _samples(self) -> list[tuple[str, dict[str, str], float]]:
        with urllib.request.urlopen(self.url, timeout=5) as answer:
            text = answer.read().decode("utf-8", "replace")
        samples = []
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match is None:
                continue
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            samples.append((match.group(1), dict(_LABEL.findall(match.group(2))), value))
        return samples

    def missing(self, uuid: str, values: Mapping[int, int]) -> str | None:
        """None once every value shows for the GPU ``uuid``, else what did not show."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                shown = {(name, labels.get("UUID")): value
                         for name, labels, value in self._samples()}
                absent = [f"{EXPORTER_NAMES.get(f, f)}={v}" for f, v in values.items()
                          if shown.get((EXPORTER_NAMES.get(f, ""), uuid)) != float(v)]
                reason = (None if not absent else
                          f"{', '.join(absent)} not shown for {uuid} at {self.url} "
                          f"within {self.wait_s:g} s")
            except OSError as exc:
                reason = f"{self.url} cannot be read ({exc})"
            if reason is None or time.monotonic() >= deadline:
                return reason
            threading.Event().wait(self.poll_s)


def exporter_view_from_env() -> ExporterView | None:
    """The view of ``$GAMEDAY_DCGM_EXPORTER_URL`` (polled ``$GAMEDAY_DCGM_EXPORTER_WAIT_S``,
    default 5 s), or None when unset."""
    url = os.environ.get(EXPORTER_URL_ENV)
    if not url:
        return None
    return ExporterView(url, wait_s=float(os.environ.get(EXPORTER_WAIT_ENV) or 5.0))
