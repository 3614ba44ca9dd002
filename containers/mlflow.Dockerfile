# syntax=docker/dockerfile:1
# The MLflow tracking server of manifests/ (PostgreSQL backend, object-store artifacts, basic auth).
#   podman build -f containers/mlflow.Dockerfile -t ghcr.io/ctpipe/ctpipe-mlflow:0.1.0 .   (or: ONLY=ctpipe-mlflow ci/build_images.sh)
# Base images are pinned to an exact tag; CI records the digest before pushing.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY containers/mlflow-requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt \
    && python -c "import mlflow.server.auth, psycopg2, boto3"

# The runtime is the build stage (the base and the venv; nothing was compiled there) with the user.
FROM build AS runtime
RUN groupadd --gid 10001 mlflow \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin mlflow
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MLFLOW_DISABLE_TELEMETRY=true
WORKDIR /tmp
USER 10001:10001
EXPOSE 5000
CMD ["mlflow", "server", "--help"]
