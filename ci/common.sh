#!/usr/bin/env bash
# Sourced by the ci/*.sh scripts: strict mode, the repository root, and the project's interpreter.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Use the active virtual environment, else the repository's .venv, else python3 on PATH.
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f "$ROOT/.venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "$ROOT/.venv/bin/activate"
fi
PYTHON="${PYTHON:-python}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
GIT_SHA="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
# The one image naming scheme (ci/build_images.sh builds, ci/compile.sh compiles for, the overlays run):
#   <registry>/ctpipe:<tag>  <registry>/ctpipe-trainer:<tag>-cuda|-cpu  <registry>/ctpipe-mlflow:<tag>
#   <registry>/ctpipe-spark:<tag>
IMAGE_REGISTRY="${IMAGE_REGISTRY:-ghcr.io/ctpipe}"
export ROOT PYTHON BUILD_DIR GIT_SHA IMAGE_REGISTRY
# image_ref NAME TAG [VARIANT] prints the reference of one image.
image_ref() { printf '%s/%s:%s%s\n' "$IMAGE_REGISTRY" "$1" "$2" "${3:+-$3}"; }
log() { printf '\n== %s\n' "$*" >&2; }
