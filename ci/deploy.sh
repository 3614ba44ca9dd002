#!/usr/bin/env bash
# Upload the compiled pipeline to KFP as a version named after the commit (idempotent), and keep the
# schedule when KFP_SCHEDULE is set. The token comes from $KFP_TOKEN (a CI secret), never the command line.
#   KFP_HOST=https://kfp.example.com KFP_TOKEN=... [KFP_SCHEDULE="0 0 3 * * *"] ci/deploy.sh
. "$(dirname "$0")/common.sh"
if [ -z "${KFP_HOST:-}" ]; then
    echo "ci/deploy.sh: set KFP_HOST (and KFP_TOKEN or KFP_TOKEN_FILE) to the KFP API to deploy to" >&2
    exit 2
fi
package="$BUILD_DIR/pipelines/continuous_training.yaml"
if [ ! -f "$package" ]; then
    "$ROOT/ci/compile.sh"
fi
args=(deploy --host "$KFP_HOST" --package "$package")
[ -n "${KFP_NAMESPACE:-}" ] && args+=(--namespace "$KFP_NAMESPACE")
[ -n "${KFP_EXPERIMENT:-}" ] && args+=(--experiment "$KFP_EXPERIMENT")
[ -n "${KFP_SCHEDULE:-}" ] && args+=(--schedule "$KFP_SCHEDULE")
[ -n "${KFP_SERVICE_ACCOUNT:-}" ] && args+=(--service-account "$KFP_SERVICE_ACCOUNT")
[ -n "${KFP_TOKEN_FILE:-}" ] && args+=(--token-file "$KFP_TOKEN_FILE")
[ -n "${PIPELINE_VERSION:-}" ] && args+=(--version "$PIPELINE_VERSION")
log "ctpipe deploy to $KFP_HOST"
"$PYTHON" -m ctpipe.pipelines.cli.main "${args[@]}"
