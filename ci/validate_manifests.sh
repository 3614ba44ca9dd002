#!/usr/bin/env bash
# Render every kustomization under manifests/ (kubectl kustomize, offline) and validate the objects:
# required fields, unique names, and custom resources against the CRD schemas in crds/.
#   ci/validate_manifests.sh
. "$(dirname "$0")/common.sh"
if [ ! -d manifests ] || [ -z "$(find manifests -name '*.yaml' -o -name '*.yml' | head -1)" ]; then
    echo "ci/validate_manifests.sh: manifests/ holds no YAML; nothing to validate" >&2
    exit 0
fi
out="$BUILD_DIR/manifests"
mkdir -p "$out"
rendered=()
while IFS= read -r kfile; do
    dir="$(dirname "$kfile")"
    name="$(echo "$dir" | tr '/' '_')"
    if command -v kubectl >/dev/null; then
        log "kubectl kustomize $dir"
        kubectl kustomize "$dir" > "$out/$name.yaml"
    elif command -v kustomize >/dev/null; then
        log "kustomize build $dir"
        kustomize build "$dir" > "$out/$name.yaml"
    else
        echo "neither kubectl nor kustomize is installed; install one to render $dir" >&2
        exit 1
    fi
    rendered+=("$out/$name.yaml")
done < <(find manifests -name kustomization.yaml -o -name kustomization.yml | sort)
log "validate ${#rendered[@]} rendered kustomization(s) and the plain manifests"
"$PYTHON" "$ROOT/ci/validate_manifests.py" --crds crds --scan manifests "${rendered[@]}"
