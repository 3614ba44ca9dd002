#!/usr/bin/env bash
# Lint: ruff over the Python code, bash -n and shellcheck (when installed) over the CI scripts.
#   ci/lint.sh
# ShellCheck is optional (apt-get install shellcheck); without it the scripts get a syntax check only.
. "$(dirname "$0")/common.sh"
log "ruff check"
"$PYTHON" -m ruff check .
log "shell scripts"
scripts=(ci/*.sh .ci/run)
for script in "${scripts[@]}"; do
    bash -n "$script"
done
if command -v shellcheck >/dev/null; then
    # SCRIPTDIR: follow each script's `. "$(dirname "$0")/common.sh"` from the script's own folder.
    shellcheck -x --source-path=SCRIPTDIR "${scripts[@]}"
else
    echo "shellcheck not installed: syntax checked with bash -n only" >&2
fi
