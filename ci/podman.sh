#!/usr/bin/env bash
# Sourced by build_images.sh and smoke_images.sh (after common.sh): podman without a daemon, set up the
# same way on a laptop, on this kind of machine and in CI.
#   podman_setup        Debian's podman, buildah, skopeo, debootstrap, runc, fuse-overlayfs, uidmap (apt, as
#                       root; else it says what to install), and the containers.conf and storage.conf below
#   base_image          a Python base made once from Debian's packages with debootstrap, reused after
#
# The configuration is written under CTPIPE_CONTAINERS_CONF_DIR (default ~/.config/ctpipe/containers) and
# named by CONTAINERS_CONF and CONTAINERS_STORAGE_CONF, which plain `podman build/run` read too:
#   export CONTAINERS_CONF=~/.config/ctpipe/containers/containers.conf
#   export CONTAINERS_STORAGE_CONF=~/.config/ctpipe/containers/storage.conf
# Why each setting (found on this kind of machine, a sandbox without CAP_SYS_RESOURCE):
#   overlay storage   vfs copies every layer whole: ~22 min and 36 GB for one build, overlay a fraction
#   runtime runc      crun fails to start containers here (it sets resource limits it may not raise)
#   default ulimits   podman's default (nofile 1048576) is above this machine's hard limit, so runc fails
# The store (graphroot) outlives the checkout: CI's fresh clone reuses the layers of earlier builds.

PODMAN_PACKAGES=(podman buildah skopeo debootstrap runc fuse-overlayfs uidmap)
CTPIPE_CONTAINERS_CONF_DIR="${CTPIPE_CONTAINERS_CONF_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/ctpipe/containers}"
# The Debian release the local base is made from; its python3 is the 3.11 the images' wheels are built for.
BASE_SUITE="${BASE_SUITE:-bookworm}"
BASE_MIRROR="${BASE_MIRROR:-http://deb.debian.org/debian}"
BASE_PACKAGES="python3,python3-venv,ca-certificates"
# The CA bundle copied into the base, so that pip reaches the index from inside a build where this
# machine's traffic goes through an intercepting proxy (the bundle pip uses here).
BASE_CA_BUNDLE="${BASE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

podman_install() {
    local missing=() package
    for package in "${PODMAN_PACKAGES[@]}"; do
        command -v dpkg-query >/dev/null && dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" \
            || missing+=("$package")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null || [ "$(id -u)" -ne 0 ]; then
        if command -v podman >/dev/null && command -v buildah >/dev/null && command -v skopeo >/dev/null; then
            return 0  # not Debian, or not root: podman from elsewhere will do
        fi
        echo "ci/podman.sh: podman is not installed; install: sudo apt-get install ${PODMAN_PACKAGES[*]}" >&2
        exit 2
    fi
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

podman_write_config() {
    local graphroot runroot nofile
    # A store of ctpipe's own, beside any other podman use of this user: its database records the storage
    # driver it was made with, and a store made with another driver refuses this configuration.
    if [ "$(id -u)" -eq 0 ]; then
        graphroot="${CTPIPE_PODMAN_STORE:-/var/lib/ctpipe/containers/storage}"
        runroot=/run/ctpipe/containers/storage
    else
        graphroot="${CTPIPE_PODMAN_STORE:-${XDG_DATA_HOME:-$HOME/.local/share}/ctpipe/containers/storage}"
        runroot="${XDG_RUNTIME_DIR:-/tmp/ctpipe-podman-$(id -u)}/ctpipe/containers/storage"
    fi
    # At most this machine's hard limit: a container may not raise it.
    nofile=20000
    if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$nofile" ]; then nofile="$(ulimit -Hn)"; fi
    mkdir -p "$CTPIPE_CONTAINERS_CONF_DIR"
    cat > "$CTPIPE_CONTAINERS_CONF_DIR/containers.conf.tmp" <<EOF
# Written by ctpipe's ci/podman.sh; read by podman through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=4096:4096"]

[engine]
runtime = "runc"
tmp_dir = "$runroot/libpod"
EOF
    cat > "$CTPIPE_CONTAINERS_CONF_DIR/storage.conf.tmp" <<EOF
# Written by ctpipe's ci/podman.sh; read by podman through CONTAINERS_STORAGE_CONF.
[storage]
driver = "overlay"
graphroot = "$graphroot"
runroot = "$runroot"
EOF
    mv "$CTPIPE_CONTAINERS_CONF_DIR/containers.conf.tmp" "$CTPIPE_CONTAINERS_CONF_DIR/containers.conf"
    mv "$CTPIPE_CONTAINERS_CONF_DIR/storage.conf.tmp" "$CTPIPE_CONTAINERS_CONF_DIR/storage.conf"
    export CONTAINERS_CONF="$CTPIPE_CONTAINERS_CONF_DIR/containers.conf"
    export CONTAINERS_STORAGE_CONF="$CTPIPE_CONTAINERS_CONF_DIR/storage.conf"
}

podman_setup() {
    podman_install
    podman_write_config
}

# base_image prints the reference of the local Python base, making it first when it is not in the store. Its tag
# is a digest of the recipe (suite, packages, CA bundle): a changed recipe makes a new base, the same one reuses it.
base_image() {
    local recipe ref rootfs
    recipe="$(printf '%s\n' "$BASE_SUITE" "$BASE_PACKAGES" "$(sha256sum < "$BASE_CA_BUNDLE")" | sha256sum | cut -c1-12)"
    ref="localhost/ctpipe-python:3.11-$BASE_SUITE-$recipe"
    if podman image exists "$ref"; then
        echo "$ref"
        return 0
    fi
    log "base image $ref: debootstrap --variant=minbase $BASE_SUITE (once; a few minutes)"
    if [ "$(id -u)" -ne 0 ]; then
        echo "ci/podman.sh: debootstrap needs root; run once as root, or set PYTHON_IMAGE to a Python base you can pull" >&2
        exit 2
    fi
    # One fixed folder per recipe: a build that failed half-way leaves nothing a second try does not remove.
    rootfs="${TMPDIR:-/var/tmp}/ctpipe-rootfs-$recipe"
    rm -rf "$rootfs"
    mkdir -p "$BUILD_DIR"
    if ! debootstrap --variant=minbase --include="$BASE_PACKAGES" "$BASE_SUITE" "$rootfs" "$BASE_MIRROR" \
            > "$BUILD_DIR/debootstrap.log" 2>&1; then
        tail -20 "$BUILD_DIR/debootstrap.log" >&2
        echo "ci/podman.sh: debootstrap failed (log: $BUILD_DIR/debootstrap.log)" >&2
        rm -rf "$rootfs"
        exit 1
    fi
    cp "$BASE_CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    # What a runtime image never uses: package lists and caches, documentation, translations.
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
        "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*
    tar -C "$rootfs" --numeric-owner -c . | podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' - "$ref" >/dev/null
    rm -rf "$rootfs"
    # Bases of an earlier recipe: nothing builds on them any more.
    podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/ctpipe-python:' | grep -vxF "$ref" \
        | xargs -r podman rmi >/dev/null 2>&1 || true
    echo "$ref"
}
