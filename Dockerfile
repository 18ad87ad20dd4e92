# syntax=docker/dockerfile:1
# Revive: `revive worker`, `revive monitor`, `revive agent`, `revive server` (Temporal dev server)
# and the CLI, in one image. The entrypoint is `revive`; the command picks the process.
#
#   docker build -t revive:0.1.0 .
#   docker build -t revive:0.1.0-slurm --build-arg SLURM_CLIENT=1 .   # + Slurm CLI and munge
#
# bookworm, pinned: with SLURM_CLIENT=1 the image carries Debian 12's Slurm 22.05 client, which
# must be within two major releases of the cluster's slurmctld.
FROM python:3.11-slim-bookworm

# 1: install slurm-client and munge (scheduler.mode local inside the pod: the Helm chart's
# slurmClient.enabled). 0: SSH/REST only.
ARG SLURM_CLIENT=0
ARG REVIVE_UID=10001

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN set -eux; \
    if [ "$SLURM_CLIENT" = "1" ]; then \
        apt-get update; \
        apt-get install -y --no-install-recommends slurm-client munge; \
        rm -rf /var/lib/apt/lists/*; \
    fi

# Only what the package needs (see .dockerignore): no tests, no venv, no secrets.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY revive ./revive
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY runbooks ./runbooks
COPY cli ./cli
RUN pip install . && cd / && rm -rf /src

RUN set -eux; \
    groupadd --gid "$REVIVE_UID" revive; \
    useradd --uid "$REVIVE_UID" --gid "$REVIVE_UID" --home-dir /home/revive --create-home --shell /usr/sbin/nologin revive; \
    install -d -o revive -g revive -m 0750 /var/lib/revive /var/lib/temporal; \
    install -d -m 0755 /etc/revive/config /etc/revive/secrets

USER ${REVIVE_UID}:${REVIVE_UID}
WORKDIR /home/revive
ENV HOME=/home/revive

# Prometheus text on REVIVE_METRICS_PORT (worker, monitor, agent); Temporal 7233/8233 (`server`).
EXPOSE 9400 7233 8233

ENTRYPOINT ["revive"]
CMD ["--help"]
