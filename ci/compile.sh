#!/usr/bin/env bash
# Compile every pipeline to KFP IR YAML under build/pipelines/, load each back, and check that no
# compiled spec carries a credential.
#   IMAGE=ghcr.io/org/ctpipe:abc123 TRAINER_IMAGE=ghcr.io/org/ctpipe-trainer:abc123-cuda \
#   CTPIPE_CONFIG=manifests/overlays/prod/ctpipe.yaml ci/compile.sh
. "$(dirname "$0")/common.sh"
out="$BUILD_DIR/pipelines"
mkdir -p "$out"
image_args=()
if [ -n "${IMAGE:-}" ]; then
    image_args=(--image "$IMAGE")
fi
log "compile continuous_training -> $out/continuous_training.yaml"
# The config compiled in as the pipeline's default names the cluster (namespace, images, secrets, PVC):
# there is no sensible built-in one, so CI stops here rather than deploy a pipeline for nobody's cluster.
if [ -z "${CTPIPE_CONFIG:-}" ]; then
    echo "ci/compile.sh: set CTPIPE_CONFIG to the ctpipe config of your cluster (in GitHub: the repository" \
        "variable CTPIPE_CONFIG), e.g. CTPIPE_CONFIG=manifests/overlays/prod/ctpipe.yaml" >&2
    exit 2
fi
config_args=(--config "$CTPIPE_CONFIG")
if [ -n "${TRAINER_IMAGE:-}" ]; then
    config_args+=(--set "kubernetes.trainer_image=$TRAINER_IMAGE")
fi
"$PYTHON" -m pipelines.cli compile --out "$out/continuous_training.yaml" "${image_args[@]}" "${config_args[@]}"
log "load back and scan for secrets"
"$PYTHON" - "$out"/*.yaml <<'PY'
import re
import sys

import yaml

pattern = re.compile(r"(?i)(password|secret_key|token)\s*[:=]\s*['\"]?[A-Za-z0-9/+_-]{12,}")
for path in sys.argv[1:]:
    text = open(path).read()
    docs = list(yaml.safe_load_all(text))
    spec = docs[0]
    assert spec.get("pipelineInfo", {}).get("name"), f"{path}: no pipelineInfo.name"
    assert spec.get("root", {}).get("dag", {}).get("tasks"), f"{path}: no tasks"
    params = sorted(spec["root"].get("inputDefinitions", {}).get("parameters", {}))
    if pattern.search(text):
        sys.exit(f"{path}: looks like it contains a credential; secrets belong in Kubernetes secrets")
    print(f"{path}: {spec['pipelineInfo']['name']}, {len(spec['root']['dag']['tasks'])} tasks, parameters {params}")
PY
