"""gameday: chaos engineering and resilience testing for GPU / AI infrastructure."""

__version__ = "0.1.0"
#: The orchestrator's container image of this version (the Dockerfile builds it;
#: deploy/kubernetes/ and ``gameday schedule --emit cronjob`` name it).
IMAGE = f"ghcr.io/gameday/gameday:{__version__}"
#: The node agent's image of this version (the Dockerfile's ``agent`` stage; the DaemonSet
#: of deploy/kubernetes/agent-daemonset.yaml names it).
AGENT_IMAGE = f"ghcr.io/gameday/gameday-agent:{__version__}"


def _import_structlog_without_rich() -> None:
    """Import structlog without its optional rich integration.

    structlog pulls in rich (~80 ms at every start) only to pretty-print tracebacks on a
    console, which gameday never asks it to do; every command pays for it otherwise.
    Reports that use rich still import it normally afterwards. Without structlog (a bare
    system Python running ``bench/gpu_check.py``) nothing is imported here.
    """
    import sys

    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog
        import structlog.dev
        import structlog.tracebacks  # noqa: F401
    except ModuleNotFoundError:
        pass
    finally:
        del sys.modules["rich"]


_import_structlog_without_rich()
