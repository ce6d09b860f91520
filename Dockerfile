# syntax=docker/dockerfile:1
# AIM realtime session orchestrator. Build: docker build -t aim-realtime:0.1.0 .
# Runs as uid 10001 with a read-only root filesystem (see k8s/base/deployment.yaml).

FROM python:3.11-slim AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/venv
WORKDIR /src
# Dependencies first, exactly as locked, so code changes reuse this layer. The client's
# pyproject.toml is a workspace member's (uv reads it); the client itself is not installed.
COPY pyproject.toml uv.lock ./
COPY clients/python/pyproject.toml clients/python/README.md ./clients/python/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace
COPY README.md ./
# the browser library the service serves at /sdk/: the npm package's modules and declarations
# (realtime/static/sdk and types link to them; the wheel gets copies)
COPY clients/js/src ./clients/js/src
COPY clients/js/types ./clients/js/types
COPY realtime ./realtime
COPY state_machines ./state_machines
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable

FROM python:3.11-slim
RUN groupadd --system --gid 10001 aim \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin aim \
 && install -d -o 10001 -g 10001 /var/lib/aim
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    AIM_DATA_DIR=/var/lib/aim
USER 10001:10001
WORKDIR /var/lib/aim
EXPOSE 8080
ENTRYPOINT ["aim-realtime"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
