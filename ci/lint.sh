#!/usr/bin/env bash
# Lint: ruff over the Python code, bash -n (and shellcheck when installed) over the CI scripts.
#   ci/lint.sh
. "$(dirname "$0")/common.sh"
log "ruff check"
"$PYTHON" -m ruff check .
log "shell scripts"
for script in ci/*.sh; do
    bash -n "$script"
done
if command -v shellcheck >/dev/null; then
    shellcheck -x ci/*.sh
else
    echo "shellcheck not installed: syntax checked with bash -n only" >&2
fi
