#!/usr/bin/env bash
# A smoke run with trigger=ci: on KFP when KFP_HOST is set (the latest deployed version; waits up to
# SMOKE_TIMEOUT seconds for it to succeed), else the whole pipeline locally with a short training.
#   KFP_HOST=https://kfp.example.com KFP_TOKEN=... ci/smoke_run.sh      # or just: ci/smoke_run.sh
. "$(dirname "$0")/common.sh"
settings=(--set train.max_steps=60 --set train.eval_every=20 --set train.checkpoint_every=20 --set train.warmup_steps=5)
if [ -n "${KFP_HOST:-}" ]; then
    args=(submit --host "$KFP_HOST" --trigger ci --run-name "ctpipe-ci-$GIT_SHA" --wait "${SMOKE_TIMEOUT:-3600}")
    [ -n "${KFP_NAMESPACE:-}" ] && args+=(--namespace "$KFP_NAMESPACE")
    [ -n "${KFP_EXPERIMENT:-}" ] && args+=(--experiment "$KFP_EXPERIMENT")
    [ -n "${KFP_TOKEN_FILE:-}" ] && args+=(--token-file "$KFP_TOKEN_FILE")
    [ -n "${SMOKE_DATA_URI:-}" ] && args+=(--data "$SMOKE_DATA_URI")
    log "smoke run on $KFP_HOST"
    "$PYTHON" -m ctpipe.pipelines.cli.main "${args[@]}" "${settings[@]}"
else
    home="${CTPIPE_HOME:-$BUILD_DIR/smoke-home}"
    log "local smoke run in $home"
    "$PYTHON" -m ctpipe.pipelines.cli.main submit --trigger ci --home "$home" ${SMOKE_DATA_URI:+--data "$SMOKE_DATA_URI"} "${settings[@]}"
fi
