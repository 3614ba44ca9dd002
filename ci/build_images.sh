#!/usr/bin/env bash
# Build the images from containers/ (the component image, the trainer image as -cuda and -cpu variants,
# the MLflow server image, the Spark image of validation.engine=spark), named by the scheme in common.sh and
# tagged with IMAGE_TAG (default: the git commit); PUSH=1 pushes them. ONLY=<image> builds one of ctpipe,
# ctpipe-trainer-cuda, ctpipe-trainer-cpu, ctpipe-mlflow, ctpipe-spark (CI builds each in its own job: a hosted
# runner's disk holds one CUDA build, not all of them).
# DRY_RUN=1 prints the commands (no Docker daemon needed). The images built are listed in build/images.txt.
#   IMAGE_REGISTRY=ghcr.io/org IMAGE_TAG=abc123 ONLY=ctpipe PUSH=1 ci/build_images.sh
. "$(dirname "$0")/common.sh"
tag="${IMAGE_TAG:-$GIT_SHA}"
run() {
    echo "+ $*" >&2
    if [ "${DRY_RUN:-0}" != "1" ]; then "$@"; fi
}
containers="${CONTAINERS_DIR:-containers}"
mapfile -t dockerfiles < <(find "$containers" -type f \( -name 'Dockerfile' -o -name 'Dockerfile.*' -o -name '*.Dockerfile' \) 2>/dev/null | sort)
if [ "${#dockerfiles[@]}" -eq 0 ]; then
    echo "ci/build_images.sh: no Dockerfiles under $containers/" >&2
    exit 1
fi
if [ "${DRY_RUN:-0}" != "1" ] && ! docker info >/dev/null 2>&1; then
    echo "ci/build_images.sh: no Docker daemon reachable; start one, or DRY_RUN=1 to print the commands" >&2
    exit 1
fi
mkdir -p "$BUILD_DIR"
: > "$BUILD_DIR/images.txt"
for dockerfile in "${dockerfiles[@]}"; do
    # containers/<name>/Dockerfile, containers/Dockerfile.<name> or containers/<name>.Dockerfile -> image name
    base="$(basename "$dockerfile")"
    case "$base" in
        Dockerfile) name="$(basename "$(dirname "$dockerfile")")" ;;
        Dockerfile.*) name="${base#Dockerfile.}" ;;
        *.Dockerfile) name="${base%.Dockerfile}" ;;
    esac
    case "$name" in
        "$(basename "$containers")"|component|ctpipe) image="ctpipe" ;;
        *) image="ctpipe-$name" ;;
    esac
    # A Dockerfile that takes the torch wheel index (the trainer) is built twice: CUDA and CPU.
    variants=("")
    if grep -q '^ARG TORCH_INDEX_URL' "$dockerfile"; then
        variants=("cuda" "cpu")
    fi
    for variant in "${variants[@]}"; do
        if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$image${variant:+-$variant}" ]; then
            continue
        fi
        full="$(image_ref "$image" "$tag" "$variant")"
        # The commit and image reference are baked in so every registered model names its code.
        build_args=(--build-arg "GIT_COMMIT=$GIT_SHA" --build-arg "IMAGE_REF=$full")
        if [ "$variant" = "cpu" ]; then
            build_args+=(--build-arg "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu")
        fi
        log "build $full from $dockerfile"
        run docker build -f "$dockerfile" "${build_args[@]}" -t "$full" --label "org.opencontainers.image.revision=$GIT_SHA" .
        if [ "${PUSH:-0}" = "1" ]; then
            run docker push "$full"
        fi
        echo "$full" >> "$BUILD_DIR/images.txt"
    done
done
if [ ! -s "$BUILD_DIR/images.txt" ]; then
    echo "ci/build_images.sh: ONLY=${ONLY:-} names no image; use one of ctpipe, ctpipe-trainer-cuda, ctpipe-trainer-cpu, ctpipe-mlflow, ctpipe-spark" >&2
    exit 2
fi
