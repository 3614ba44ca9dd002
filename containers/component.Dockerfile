# syntax=docker/dockerfile:1
# The component image: every KFP step of the pipeline and the watcher CronJob run in it.
#   ci/build_images.sh                      (podman here, from a local Debian base; docker buildx on GitHub)
#   podman build -f containers/component.Dockerfile -t ghcr.io/ctpipe/ctpipe:0.1.0 .
# Base images are pinned to an exact tag; CI resolves and records the digest
# (docker buildx imagetools inspect python:3.11.11-slim-bookworm) before pushing.
# Stages: deps (torch and the dependencies; changes only with pyproject.toml), build (the package alone),
# runtime (deps, the user, the package as a small layer on top): a commit that changes only code rebuilds in
# seconds.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
# torch's CPU build: the steps never need CUDA, and an unpinned torch would pull a multi-GB CUDA build.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

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
# KFP's launcher downloads input artifacts to /gcs, /minio and /s3 at the filesystem root. KFP >= 2.3 mounts
# emptyDirs there (kubeflow/pipelines#10857); for older backends the non-root user owns them in the image.
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
# The image's own check, as its user in its WORKDIR: run where the source was (/src), the folder ctpipe/
# shadowed the installed package and the check failed on ctpipe.components.
RUN python -c "import ctpipe.components, ctpipe.pipelines, kfp, mlflow, torch"
# Lineage recorded on every registered model (ctpipe.git_commit, ctpipe.image), e.g.
#   --build-arg GIT_COMMIT=$(git rev-parse HEAD) --build-arg IMAGE_REF=ghcr.io/ctpipe/ctpipe:0.1.0
# Last: a new commit rebuilds nothing above.
ARG GIT_COMMIT=""
ARG IMAGE_REF=""
LABEL org.opencontainers.image.title="ctpipe component image" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
ENV CTPIPE_GIT_COMMIT=${GIT_COMMIT} \
    CTPIPE_IMAGE=${IMAGE_REF}
CMD ["ctpipe", "--help"]
