#!/usr/bin/env bash
# Compile every pipeline to KFP IR YAML under build/pipelines/, load each back, and check that no
# compiled spec carries a credential. With IMAGE_TAG set, the pipeline uses the images ci/build_images.sh
# builds with that tag (the scheme in common.sh): the component image for every step, the trainer
# image whose variant the config asks for (-cuda when kubernetes.worker_gpus > 0, else -cpu), and the Spark
# image of validation.engine=spark.
#   CTPIPE_CONFIG=manifests/overlays/prod/ctpipe.yaml IMAGE_REGISTRY=ghcr.io/org IMAGE_TAG=abc123 ci/compile.sh
. "$(dirname "$0")/common.sh"
out="$BUILD_DIR/pipelines"
mkdir -p "$out"
# The config compiled in as the pipeline's default names the cluster (namespace, images, secrets, PVC):
# there is no sensible built-in one, so CI stops here rather than deploy a pipeline for nobody's cluster.
if [ -z "${CTPIPE_CONFIG:-}" ]; then
    echo "ci/compile.sh: set CTPIPE_CONFIG to the ctpipe config of your cluster (in GitHub: the repository" \
        "variable CTPIPE_CONFIG), e.g. CTPIPE_CONFIG=manifests/overlays/prod/ctpipe.yaml" >&2
    exit 2
fi
config_args=(--config "$CTPIPE_CONFIG")
if [ -n "${IMAGE_TAG:-}" ]; then
    variant="$("$PYTHON" - "$CTPIPE_CONFIG" <<'PY'
import sys

from ctpipe.components.run_config import load_config

print("cuda" if load_config(sys.argv[1]).kubernetes.worker_gpus > 0 else "cpu")
PY
)"
    config_args+=(--set "kubernetes.image=$(image_ref ctpipe "$IMAGE_TAG")"
                  --set "kubernetes.trainer_image=$(image_ref ctpipe-trainer "$IMAGE_TAG" "$variant")"
                  --set "kubernetes.spark_image=$(image_ref ctpipe-spark "$IMAGE_TAG")")
fi
log "compile continuous_training -> $out/continuous_training.yaml"
"$PYTHON" -m ctpipe.pipelines.cli.main compile --out "$out/continuous_training.yaml" "${config_args[@]}"
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
