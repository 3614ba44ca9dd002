# syntax=docker/dockerfile:1
# The Spark image: the validate step's SparkApplication (validation.engine=spark on a cluster) runs its driver and
# executors in it. Spark 4.1 (its DataSketches aggregates) on Java 17, ctpipe installed for the driver's Python
# and the executors' Python workers, run as the non-root user of the other images:
#   ONLY=ctpipe-spark ci/build_images.sh       (GitHub; Apache's image is on Docker Hub, not reachable here)
#   docker build -f containers/spark.Dockerfile -t ghcr.io/ctpipe/ctpipe-spark:0.1.0 .
# Spark, Java 17, tini and Spark's own entrypoint (its `driver` and `executor` commands, what the Spark Operator's
# spark-submit starts the pods with) come from Apache's Spark image of that release; Python 3.11 and ctpipe from
# the same Python base as the other images (Apache's python3 variant has Ubuntu's 3.10; ctpipe needs 3.11).
# Stages as the component image's: deps (changes only with pyproject.toml), build (the package alone), runtime.
# Base images are pinned to an exact tag; CI records the digests before pushing.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
# The release in components/lib/kube/sparkapplication.py SPARK_VERSION (tests/containers check they agree).
ARG SPARK_IMAGE=apache/spark:4.1.1-scala2.13-java17-ubuntu
# torch's CPU build (ctpipe depends on it; validation never needs CUDA).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG TORCH_INDEX_URL
ARG TORCH_FIND_LINKS=""
# torch first and pinned, so installing the dependencies below never replaces it.
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" ${TORCH_FIND_LINKS:+--find-links "$TORCH_FIND_LINKS"} torch==2.13.0
COPY pyproject.toml /src/pyproject.toml
# Extra packages, e.g. an fsspec backend for data in an object store: --build-arg EXTRA_PACKAGES="s3fs==2025.9.0".
ARG EXTRA_PACKAGES=""
# The dependencies pyproject.toml declares (not its extras): pyspark itself is Spark's own (SPARK_HOME/python, put
# on the Python path by spark-submit for the driver and by the executors for their Python workers): the same
# release as the JVM, and no second copy of its jars.
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
# spark-submit runs a file: this one runs `python -m MODULE ARGS` (the application's mainApplicationFile).
COPY containers/spark_entry.py /opt/ctpipe/spark_entry.py

FROM ${SPARK_IMAGE} AS spark

FROM deps AS runtime
RUN groupadd --gid 10001 ctpipe \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ctpipe
# No COPY --link: Debian's buildah (1.28) refuses it.
COPY --from=spark /opt/java/openjdk /opt/java/openjdk
COPY --from=spark /opt/spark /opt/spark
COPY --from=spark /opt/entrypoint.sh /opt/decom.sh /opt/
COPY --from=spark /usr/bin/tini /usr/bin/tini
COPY --from=build /pkg/opt/venv /opt/venv
COPY --from=build /opt/ctpipe /opt/ctpipe
# The driver's Python and the executors' Python workers are the venv's (ctpipe and its libraries).
ENV JAVA_HOME=/opt/java/openjdk \
    SPARK_HOME=/opt/spark \
    PATH=/opt/venv/bin:/opt/spark/bin:/opt/java/openjdk/bin:$PATH \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MLFLOW_DISABLE_TELEMETRY=true
# A writable working directory on a read-only root filesystem: the pods mount an emptyDir at /tmp.
WORKDIR /tmp
USER 10001:10001
# The image's own check, as its user in its WORKDIR (where no source folder shadows the installed package).
RUN python -c "import ctpipe.components.steps.validate_data.validate" \
    && python /opt/ctpipe/spark_entry.py json.tool --help > /dev/null
# Lineage recorded on every registered model (ctpipe.git_commit, ctpipe.image), e.g.
#   --build-arg GIT_COMMIT=$(git rev-parse HEAD) --build-arg IMAGE_REF=ghcr.io/ctpipe/ctpipe-spark:0.1.0
# Last: a new commit rebuilds nothing above.
ARG GIT_COMMIT=""
ARG IMAGE_REF=""
LABEL org.opencontainers.image.title="ctpipe Spark image" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
ENV CTPIPE_GIT_COMMIT=${GIT_COMMIT} \
    CTPIPE_IMAGE=${IMAGE_REF}
# Spark's entrypoint: `driver ...` and `executor` (as spark-submit starts the pods), anything else passed through.
ENTRYPOINT ["/opt/entrypoint.sh"]
