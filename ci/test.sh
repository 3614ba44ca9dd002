#!/usr/bin/env bash
# Unit tests (everything but the end-to-end pipeline runs); CTPIPE_E2E=1 runs those too.
#   ci/test.sh [extra pytest args]
. "$(dirname "$0")/common.sh"
marker=(-m "not e2e")
if [ "${CTPIPE_E2E:-0}" = "1" ]; then
    marker=()
fi
log "pytest ${marker[*]} $*"
set +e
"$PYTHON" -m pytest -q "${marker[@]}" "$@"
status=$?
set -e
# pytest's 5 means "no tests collected": a CI failure, not a pass.
if [ "$status" -eq 5 ]; then
    echo "ci/test.sh: no tests were collected" >&2
    exit 1
fi
exit "$status"
