#!/usr/bin/env bash
# Install the project for CI: torch first and pinned (on GitHub from the CPU wheel index; an unpinned
# torch pulls a multi-GB CUDA build), then the project with its test extras.
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu ci/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --upgrade pip
if [ -n "${TORCH_INDEX_URL:-}" ]; then
    python -m pip install torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
    python -m pip install torch==2.13.0
fi
python -m pip install -e '.[test]'
