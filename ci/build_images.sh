#!/usr/bin/env bash
# Build the images that containers/images.list names (one line each: the component image, the trainer's CPU and
# CUDA variants, the MLflow server, the Spark image of validation.engine=spark; a new image is a new line), named by the scheme in common.sh and tagged with
# IMAGE_TAG (default: the commit). Prints each image's name, size and user; lists the references in
# build/images.txt (ci/smoke_images.sh runs those).
#   ci/build_images.sh                                                   # here: podman, no daemon
#   IMAGE_REGISTRY=ghcr.io/org IMAGE_TAG=abc123 ONLY=ctpipe PUSH=1 ci/build_images.sh   # GitHub: docker
# BUILDER      docker where a Docker daemon answers (GitHub's runners), else podman: Debian's podman, installed
#              and configured by ci/podman.sh, building from a Python base it makes once with debootstrap
#              (PYTHON_IMAGE=<an image you can pull> skips that) and with torch's CPU wheel from TORCH_WHEELS
#              (default: the folder pip's find-links names, where this machine keeps it; else PyTorch's index)
# ONLY         one image of the list; the "registry" lines (CUDA) are built by podman only when named here
# PUSH=1       pushes each image; DRY_RUN=1 prints the commands and builds nothing
# OCI_DIR      also exports each image into this OCI layout (skopeo; push it later with
#              `skopeo copy oci:DIR:NAME docker://REF`); KEEP_TAGS (default 2): podman keeps this many tags per
#              repository and removes older ones and dangling layers, so the store does not grow with every commit
. "$(dirname "$0")/common.sh"
tag="${IMAGE_TAG:-$GIT_SHA}"
IMAGES_LIST="${IMAGES_LIST:-containers/images.list}"
CPU_TORCH_INDEX="https://download.pytorch.org/whl/cpu"
CUDA_TORCH_INDEX="https://pypi.org/simple"  # PyPI's Linux wheels bundle the CUDA runtime and NCCL
run() {
    echo "+ $*" >&2
    if [ "${DRY_RUN:-0}" != "1" ]; then "$@"; fi
}
if [ ! -f "$IMAGES_LIST" ]; then
    echo "ci/build_images.sh: no image list at $IMAGES_LIST" >&2
    exit 1
fi
builder="${BUILDER:-}"
if [ -z "$builder" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then builder=docker; else builder=podman; fi
fi
case "$builder" in
    docker|podman) ;;
    *) echo "ci/build_images.sh: BUILDER=$builder; use docker or podman" >&2; exit 2 ;;
esac

python_image=""
wheels=""
if [ "$builder" = podman ] && [ "${DRY_RUN:-0}" != "1" ]; then
    # shellcheck source=ci/podman.sh
    . "$ROOT/ci/podman.sh"
    podman_setup
    df -h "$(dirname "$(podman info --format '{{.Store.GraphRoot}}')")" | tail -1 | awk '{print "disk: " $4 " free"}' >&2
    python_image="${PYTHON_IMAGE:-$(base_image)}"
elif [ -n "${PYTHON_IMAGE:-}" ]; then
    python_image="$PYTHON_IMAGE"
fi
if [ "$builder" = podman ]; then
    # A local torch CPU wheel (this machine keeps one where pip's find-links points): mounted into the build.
    # shellcheck disable=SC2086  # find-links may name several folders
    for dir in ${TORCH_WHEELS:-} ${PIP_FIND_LINKS:-} $("$PYTHON" -m pip config get global.find-links 2>/dev/null || true); do
        if compgen -G "$dir/torch-2.13.0+cpu-*.whl" >/dev/null; then wheels="$dir"; break; fi
    done
fi

# variant_of REF: the variant suffix of an image's tag (cpu, cuda), empty for none.
variant_of() { case "$1" in *-cpu) echo cpu ;; *-cuda) echo cuda ;; *) echo "" ;; esac; }

# torch_args VARIANT: the build arguments that choose torch's build, for a Containerfile that takes them.
torch_args() {
    if [ "$1" = cuda ]; then
        printf '%s\n' --build-arg "TORCH_INDEX_URL=$CUDA_TORCH_INDEX"
    elif [ -n "$wheels" ]; then
        local index
        index="$("$PYTHON" -m pip config get global.index-url 2>/dev/null || echo https://pypi.org/simple)"
        printf '%s\n' --volume "$wheels:/wheels:ro" --build-arg "TORCH_FIND_LINKS=/wheels" --build-arg "TORCH_INDEX_URL=$index"
    else
        printf '%s\n' --build-arg "TORCH_INDEX_URL=$CPU_TORCH_INDEX"
    fi
}

mkdir -p "$BUILD_DIR"
: > "$BUILD_DIR/images.txt"
built=()
while read -r name repo variant file where _; do
    case "$name" in ''|'#'*) continue ;; esac
    [ "$variant" = "-" ] && variant=""
    if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then
        continue
    fi
    if [ "$where" = registry ] && [ "$builder" = podman ] && [ -z "${ONLY:-}" ]; then
        log "skip $name: built where its registry base and wheels are reachable (GitHub); ONLY=$name builds it here"
        continue
    fi
    if [ ! -f "$file" ]; then
        echo "ci/build_images.sh: $IMAGES_LIST names $file for $name; there is no such file" >&2
        exit 1
    fi
    full="$(image_ref "$repo" "$tag" "$variant")"
    # The commit and image reference are baked in so every registered model names its code.
    build_args=(--build-arg "GIT_COMMIT=$GIT_SHA" --build-arg "IMAGE_REF=$full")
    [ -n "$python_image" ] && build_args+=(--build-arg "PYTHON_IMAGE=$python_image")
    if grep -q '^ARG TORCH_INDEX_URL' "$file"; then
        mapfile -t extra < <(torch_args "${variant:-cpu}")
        build_args+=("${extra[@]}")
    fi
    log "build $name: $full from $file ($builder)"
    started=$SECONDS
    if [ "$builder" = podman ]; then
        # The first stage (the dependencies) tagged as this image's cache: a tag keeps its layers through the
        # prune below, so an unchanged dependency set is reused (the build that follows finds them).
        stage="$(awk 'toupper($1) == "FROM" { print (toupper($3) == "AS" ? $4 : ""); exit }' "$file")"
        if [ -n "$stage" ]; then
            run podman build -f "$file" "${build_args[@]}" --target "$stage" -t "localhost/ctpipe-build-cache:$name" . >&2
        fi
    fi
    run "$builder" build -f "$file" "${build_args[@]}" -t "$full" --label "org.opencontainers.image.revision=$GIT_SHA" .
    echo "$name built in $((SECONDS - started)) s" >&2
    if [ "${PUSH:-0}" = "1" ]; then
        run "$builder" push "$full"
    fi
    if [ -n "${OCI_DIR:-}" ]; then
        mkdir -p "$OCI_DIR"
        run skopeo copy "containers-storage:$full" "oci:$OCI_DIR:$name"
    fi
    echo "$full" >> "$BUILD_DIR/images.txt"
    built+=("$full")
done < "$IMAGES_LIST"
if [ ! -s "$BUILD_DIR/images.txt" ]; then
    names="$(awk '!/^#/ && NF {printf "%s%s", sep, $1; sep=", "}' "$IMAGES_LIST")"
    echo "ci/build_images.sh: ONLY=${ONLY:-} names no image; use one of $names" >&2
    exit 2
fi
[ "${DRY_RUN:-0}" = "1" ] && exit 0

if [ "$builder" = podman ]; then
    # Bounded: older tags of each repository beyond KEEP_TAGS, then the layers no tag uses any more (a
    # dependency stage replaced by a new one; the build stages of earlier commits).
    for full in "${built[@]}"; do
        # Newest first; the same repository and the same variant suffix (-cpu, -cuda) as this image.
        podman images --sort created --format '{{.Repository}}:{{.Tag}}' \
            | awk -v repo="${full%:*}" -v suffix="$(variant_of "$full")" '{
                  match($0, /:[^:\/]*$/); name = substr($0, 1, RSTART - 1); tag = substr($0, RSTART + 1)
                  if (name == repo && (suffix == "" ? tag !~ /-(cpu|cuda)$/ : tag ~ ("-" suffix "$"))) print }' \
            | tail -n +"$((${KEEP_TAGS:-2} + 1))" | grep -vxF "$full" | xargs -r podman rmi >/dev/null || true
    done
    podman image prune -f >/dev/null
fi
log "images"
printf '%-56s %10s  %s\n' IMAGE SIZE USER
for full in "${built[@]}"; do
    printf '%-56s %10s  %s\n' "$full" "$("$builder" images --format '{{.Size}}' "$full" | head -1)" \
        "$("$builder" image inspect --format '{{.Config.User}}' "$full")"
done
