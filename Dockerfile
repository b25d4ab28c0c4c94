# Two images of one version, each installing only its side's extra with the exact pins of
# constraints.txt:
#
#   docker build -t ghcr.io/gameday/gameday:0.1.0 .
#   docker build --target agent -t ghcr.io/gameday/gameday-agent:0.1.0 .
#
# - the orchestrator (the default, last stage): `gameday play`, `gameday gate`, the CronJob
#   of deploy/kubernetes/gameday-cronjob.yaml; gameday[orchestrator];
# - the node agent (`--target agent`): `gameday agent serve`, the DaemonSet of
#   deploy/kubernetes/agent-daemonset.yaml; gameday[agent,kubernetes] (the DaemonSet
#   reconciles its node's marks through the API; --build-arg AGENT_EXTRAS=agent leaves the
#   Kubernetes client out) and the tools the host backend calls.
#
# The tags are the package version (pyproject.toml; tests/kubernetes/test_image.py keeps
# every image reference in deploy/ and `gameday schedule --emit cronjob` equal to them).
# Both run as the non-root user 65532 by default; the agent's DaemonSet sets
# runAsUser: 0 with only NET_ADMIN, SYS_ADMIN and KILL, since its faults need root.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS source
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY gameday ./gameday
COPY faults ./faults
COPY verifiers ./verifiers
RUN python -m venv /opt/gameday \
 && /opt/gameday/bin/pip install --no-cache-dir --upgrade pip

FROM source AS build-agent
# --build-arg AGENT_EXTRAS=agent: an agent without the Kubernetes client (most of the
# image), for nodes whose agent does not --reconcile-kubernetes
ARG AGENT_EXTRAS=agent,kubernetes
RUN /opt/gameday/bin/pip install --no-cache-dir -c constraints.txt ".[${AGENT_EXTRAS}]"

FROM source AS build-orchestrator
RUN /opt/gameday/bin/pip install --no-cache-dir -c constraints.txt '.[orchestrator]'

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
RUN groupadd --gid 65532 gameday \
 && useradd --uid 65532 --gid 65532 --home-dir /work --create-home --shell /usr/sbin/nologin gameday
ENV PATH=/opt/gameday/bin:$PATH \
    GAMEDAY_HOME=/work/.gameday \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /work
ENTRYPOINT ["gameday"]

FROM runtime AS agent
# what the host backend calls: nft / iptables (net.loss, partition), ip (link faults),
# libnetfilter_queue (net.latency's packet delayer, through ctypes),
# fusermount3 and libfuse3 (the fault filesystem), stress-ng (node hogs)
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      fuse3 iproute2 iptables nftables libnetfilter-queue1 stress-ng ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-agent /opt/gameday /opt/gameday
USER 65532:65532
CMD ["agent", "serve", "--help"]

FROM runtime AS orchestrator
COPY --from=build-orchestrator /opt/gameday /opt/gameday
COPY --chown=65532:65532 experiments /work/experiments
COPY --chown=65532:65532 playbooks /work/playbooks
USER 65532:65532
CMD ["--help"]
