# syntax=docker/dockerfile:1
# The component image: every KFP step of the pipeline and the watcher CronJob run in it.
#   docker build -f containers/component.Dockerfile -t ghcr.io/ctpipe/ctpipe:0.1.0 .
# Base images are pinned to an exact tag; CI resolves and records the digest
# (docker buildx imagetools inspect python:3.11.11-slim-bookworm) before pushing.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first and pinned, from the CPU index: the steps never need CUDA, and an unpinned torch
# would pull a multi-GB CUDA build.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY components ./components
COPY pipelines ./pipelines
COPY ctpipe ./ctpipe
COPY setup.py ./
# Extra fsspec backends for a data root in an object store, e.g. --build-arg EXTRA_PACKAGES="s3fs==2025.9.0".
ARG EXTRA_PACKAGES=""
# A regular (non-editable) install: the package lands in site-packages, nothing is put on sys.path by hand.
RUN pip install --no-cache-dir . ${EXTRA_PACKAGES} \
    && python -c "import ctpipe.components, ctpipe.pipelines, kfp, mlflow, torch"

FROM ${PYTHON_IMAGE} AS runtime
# Lineage recorded on every registered model (ctpipe.git_commit, ctpipe.image), e.g.
#   --build-arg GIT_COMMIT=$(git rev-parse HEAD) --build-arg IMAGE_REF=ghcr.io/ctpipe/ctpipe:0.1.0
ARG GIT_COMMIT=""
ARG IMAGE_REF=""
LABEL org.opencontainers.image.title="ctpipe component image" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
# KFP's launcher downloads input artifacts to /gcs, /minio and /s3 at the filesystem root. KFP >= 2.3 mounts
# emptyDirs there (kubeflow/pipelines#10857); for older backends the non-root user owns them in the image.
RUN groupadd --gid 10001 ctpipe \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ctpipe \
    && mkdir -p /gcs /minio /s3 \
    && chown 10001:10001 /gcs /minio /s3
# --link: the venv becomes its own layer, independent of the base image's (less disk while building).
COPY --link --from=build /opt/venv /opt/venv
# KFP runs `python3 -m kfp.dsl.executor_main`: the venv's python3 must come first on PATH.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MLFLOW_DISABLE_TELEMETRY=true \
    CTPIPE_GIT_COMMIT=${GIT_COMMIT} \
    CTPIPE_IMAGE=${IMAGE_REF}
WORKDIR /tmp
USER 10001:10001
CMD ["ctpipe", "--help"]
