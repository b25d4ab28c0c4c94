# The gameday image: the orchestrator (`gameday play`, `gameday gate`, the CronJob of
# deploy/kubernetes/gameday-cronjob.yaml) and the node agent (`gameday agent serve`, the
# DaemonSet of deploy/kubernetes/agent-daemonset.yaml) are the same program.
#
#   docker build -t ghcr.io/gameday/gameday:0.1.0 .
#
# The tag is the package version (pyproject.toml; tests/kubernetes/test_image.py keeps
# every image reference in deploy/ and `gameday schedule --emit cronjob` equal to it).
# It runs as the non-root user 65532 by default; the agent's DaemonSet sets
# runAsUser: 0 with only NET_ADMIN, SYS_ADMIN and KILL, since its faults need root.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gameday ./gameday
COPY faults ./faults
COPY verifiers ./verifiers
# the same extras as `make setup` installs for the host backend (pyroute2, mfusepy)
RUN python -m venv /opt/gameday \
 && /opt/gameday/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/gameday/bin/pip install --no-cache-dir '.[host]'

FROM python:${PYTHON_VERSION}-slim-bookworm
# what the host backend calls: nft / iptables (net.loss, partition), ip (link faults),
# fusermount3 and libfuse3 (the fault filesystem), stress-ng (node hogs)
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      fuse3 iproute2 iptables nftables stress-ng ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 gameday \
 && useradd --uid 65532 --gid 65532 --home-dir /work --create-home --shell /usr/sbin/nologin gameday
COPY --from=build /opt/gameday /opt/gameday
COPY --chown=65532:65532 experiments /work/experiments
COPY --chown=65532:65532 playbooks /work/playbooks
ENV PATH=/opt/gameday/bin:$PATH \
    GAMEDAY_HOME=/work/.gameday \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /work
USER 65532:65532
ENTRYPOINT ["gameday"]
CMD ["--help"]
