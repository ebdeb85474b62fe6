# syntax=docker/dockerfile:1
# The Holdfast worker image: `python -m holdfast.worker`, runtime dependencies only (no CDK, no tests).
# Build:  docker build -t holdfast-worker .          (the CDK stack builds it on `cdk deploy`)
# Run:    docker run --init --env-file .holdfast.env holdfast-worker   (`holdfast localaws` writes it)

FROM python:3.12-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The project's own metadata first, then the code: `pip install .` installs the one
# `holdfast` package (holdfast/worker and /lambdas are links to the folders beside it) with
# [project.dependencies] only; the cdk/local/dev extras (aws-cdk-lib, ...) stay out. infra/
# (the CDK constructs) is not in the context (see .dockerignore): its link dangles and the
# package is built without it. The metadata's long description is an empty README for the
# same reason: neither may change the image, or every infra or README edit is a deploy.
COPY pyproject.toml LICENSE ./
COPY holdfast ./holdfast
COPY worker ./worker
COPY lambdas ./lambdas
RUN touch README.md \
 && python -m venv /opt/holdfast \
 && /opt/holdfast/bin/pip install . \
 && /opt/holdfast/bin/python -c "import holdfast.core, holdfast.worker, holdfast.runner"

FROM python:3.12-slim-bookworm
# A fixed non-root uid/gid: nothing in the container runs as root.
RUN groupadd --system --gid 10001 holdfast \
 && useradd --system --uid 10001 --gid holdfast --no-create-home --shell /usr/sbin/nologin holdfast
COPY --from=build /opt/holdfast /opt/holdfast
ENV PATH=/opt/holdfast/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
# Docker's own health check; ECS runs the same command from the task definition.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "holdfast.worker.health"]
# Exec form: the worker is PID 1 (or the child of ECS's init process, initProcessEnabled)
# and receives SIGTERM directly; it installs its own handler, stops claiming, releases its
# leases and exits within the task's stopTimeout. Use `docker run --init` locally.
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "holdfast.worker"]
