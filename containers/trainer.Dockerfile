# syntax=docker/dockerfile:1
# The trainer image: the PyTorchJob pods run `python -m ctpipe.components.steps.train.worker` in it.
# Two variants from one file, chosen by the torch wheel index:
#   CUDA (default; PyPI's Linux torch wheels bundle the CUDA runtime and NCCL, the node supplies the driver):
#     docker build -f containers/trainer.Dockerfile -t ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda .
#   CPU:
#     docker build -f containers/trainer.Dockerfile --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
#       -t ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cpu .
# Base images are pinned to an exact tag; CI records the digest before pushing.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first and pinned, so installing the package below never replaces it.
RUN pip install --no-cache-dir --index-url ${TORCH_INDEX_URL} torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY components ./components
COPY pipelines ./pipelines
COPY ctpipe ./ctpipe
COPY setup.py ./
RUN pip install --no-cache-dir . \
    && python -c "import ctpipe.components.steps.train.worker, torch.distributed"

FROM ${PYTHON_IMAGE} AS runtime
# Lineage recorded on every registered model (ctpipe.git_commit, ctpipe.image), e.g.
#   --build-arg GIT_COMMIT=$(git rev-parse HEAD) --build-arg IMAGE_REF=ghcr.io/ctpipe/ctpipe:0.1.0
ARG GIT_COMMIT=""
ARG IMAGE_REF=""
LABEL org.opencontainers.image.title="ctpipe trainer image" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
RUN groupadd --gid 10001 ctpipe \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ctpipe
# --link: the venv becomes its own layer, independent of the base image's (less disk while building).
COPY --link --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MLFLOW_DISABLE_TELEMETRY=true \
    CTPIPE_GIT_COMMIT=${GIT_COMMIT} \
    CTPIPE_IMAGE=${IMAGE_REF}
WORKDIR /tmp
USER 10001:10001
# The PyTorchJob sets the full command; this default shows the worker's usage.
CMD ["python", "-m", "ctpipe.components.steps.train.worker", "--help"]
