# syntax=docker/dockerfile:1
# The trainer image: the PyTorchJob pods run `python -m ctpipe.components.steps.train.worker` in it.
# Two variants from one file, chosen by the torch wheel index:
#   CUDA (default; PyPI's Linux torch wheels bundle the CUDA runtime and NCCL, the node supplies the driver):
#     docker build -f containers/trainer.Dockerfile -t ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda .
#   CPU:
#     podman build -f containers/trainer.Dockerfile --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
#       -t ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cpu .
# ci/build_images.sh builds both (the CPU one here, from a local Debian base and a local torch wheel).
# Base images are pinned to an exact tag; CI records the digest before pushing.
# The deps and build stages are the component image's, word for word: the CPU variant reuses its layers.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG TORCH_INDEX_URL=https://pypi.org/simple

FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
# The venv's python3 first: KFP runs `python3 -m kfp.dsl.executor_main`.
ENV PATH=/opt/venv/bin:$PATH
# TORCH_FIND_LINKS: a folder of wheels searched before the index, e.g. a local torch wheel mounted into the
# build (podman build -v /opt/wheels:/wheels:ro --build-arg TORCH_FIND_LINKS=/wheels).
ARG TORCH_INDEX_URL
ARG TORCH_FIND_LINKS=""
# torch first and pinned, so installing the dependencies below never replaces it.
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" ${TORCH_FIND_LINKS:+--find-links "$TORCH_FIND_LINKS"} torch==2.13.0
COPY pyproject.toml /src/pyproject.toml
# Extra fsspec backends for a data root in an object store, e.g. --build-arg EXTRA_PACKAGES="s3fs==2025.9.0".
ARG EXTRA_PACKAGES=""
# The dependencies pyproject.toml declares, read by Python's own TOML parser: the layer depends on no code.
RUN python -c "import tomllib; print(*tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt ${EXTRA_PACKAGES} \
    && rm /tmp/requirements.txt

FROM deps AS build
WORKDIR /src
COPY README.md setup.py ./
COPY components ./components
COPY pipelines ./pipelines
COPY ctpipe ./ctpipe
# A regular (non-editable) install of the package alone, under /pkg: the runtime copies it onto the venv.
RUN pip install --no-cache-dir --no-deps --no-warn-script-location --root /pkg .

# The runtime is the deps stage (the base and the venv; nothing was compiled there, no build tools) with the
# user and the package: no 2 GB copy of the venv, and the images share its layers with the build cache.
FROM deps AS runtime
# Up to the import check, the component image's runtime stage word for word: the two images share these
# layers (the 2 GB venv once on disk, built once). /gcs, /minio and /s3 are the component image's (KFP's
# launcher); a trainer pod never uses them.
RUN groupadd --gid 10001 ctpipe \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ctpipe \
    && mkdir -p /gcs /minio /s3 \
    && chown 10001:10001 /gcs /minio /s3
# No COPY --link: Debian's buildah (1.28) refuses it, and podman builds these images without a daemon.
COPY --from=build /pkg/opt/venv /opt/venv
# PATH (the venv's python3 first: KFP runs `python3 -m kfp.dsl.executor_main`) comes from the deps stage.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MLFLOW_DISABLE_TELEMETRY=true
WORKDIR /tmp
USER 10001:10001
# The image's own check, as its user in its WORKDIR (run in /src, the source folder ctpipe/ shadowed the
# installed package).
RUN python -c "import ctpipe.components.steps.train.worker, torch.distributed"
# Lineage recorded on every registered model (ctpipe.git_commit, ctpipe.image), e.g.
#   --build-arg GIT_COMMIT=$(git rev-parse HEAD) --build-arg IMAGE_REF=ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda
# Last: a new commit rebuilds nothing above.
ARG GIT_COMMIT=""
ARG IMAGE_REF=""
LABEL org.opencontainers.image.title="ctpipe trainer image" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
ENV CTPIPE_GIT_COMMIT=${GIT_COMMIT} \
    CTPIPE_IMAGE=${IMAGE_REF}
# The PyTorchJob sets the full command; this default shows the worker's usage.
CMD ["python", "-m", "ctpipe.components.steps.train.worker", "--help"]
