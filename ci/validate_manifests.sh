#!/usr/bin/env bash
# Render every kustomization under manifests/ (kubectl kustomize, offline) and validate the objects:
# required fields, unique names, and custom resources against the CRD schemas the package vendors.
#   ci/validate_manifests.sh
. "$(dirname "$0")/common.sh"
if [ ! -d manifests ] || [ -z "$(find manifests -name '*.yaml' -o -name '*.yml' | head -1)" ]; then
    echo "ci/validate_manifests.sh: manifests/ holds no YAML; nothing to validate" >&2
    exit 0
fi
render() {
    if command -v kubectl >/dev/null; then
        kubectl kustomize "$1"
    elif command -v kustomize >/dev/null; then
        kustomize build "$1"
    else
        echo "neither kubectl nor kustomize is installed; install one to render $1" >&2
        return 1
    fi
}
out="$BUILD_DIR/manifests"
mkdir -p "$out"
rendered=()
while IFS= read -r kfile; do
    dir="$(dirname "$kfile")"
    name="$(echo "$dir" | tr '/' '_')"
    src="$dir"
    # Secret generators read git-ignored *.env files; render with their committed *.env.example instead.
    if find "$dir" -maxdepth 1 -name '*.example' | grep -q .; then
        src="$(mktemp -d)/$(basename "$dir")"
        cp -r "$dir" "$src"
        for example in "$src"/*.example; do
            [ -e "${example%.example}" ] || cp "$example" "${example%.example}"
        done
    fi
    log "render $dir"
    render "$src" > "$out/$name.yaml"
    rendered+=("$out/$name.yaml")
done < <(find manifests -name kustomization.yaml -o -name kustomization.yml | sort)
log "validate ${#rendered[@]} rendered kustomization(s) and the plain manifests"
# The CustomResourceDefinitions the package vendors (components/lib/kube/crd_schemas), unless CRDS_DIR names others.
crds="${CRDS_DIR:-$ROOT/components/lib/kube/crd_schemas}"
"$PYTHON" "$ROOT/ci/validate_manifests.py" --crds "$crds" --scan manifests "${rendered[@]}"
