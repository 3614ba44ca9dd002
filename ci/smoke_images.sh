#!/usr/bin/env bash
# Run each image ci/build_images.sh built (build/images.txt) as a cluster runs it: as the image's own non-root
# user, read-only root filesystem, no network, no capabilities, no privilege escalation, data and artifacts on
# mounted volumes. Prints each image's name, size and user; exits non-zero on the first check that fails.
#   ci/build_images.sh && ci/smoke_images.sh
# component image: `ctpipe --version`; torch's CPU build, no CUDA packages, no test-only code; the validate
#   step's real KFP entry point (`python3 -m kfp.dsl.executor_main`, the compiled command, an executor input as
#   KFP's driver writes it: ci/smoke_steps.py) on demo data; select_checkpoint the same way on what training
#   wrote; the export loaded with torch.load(weights_only=True) and serving rows
# trainer image (CPU): two ranks of `python -m ctpipe.components.steps.train.worker` in two containers, joined
#   only by the env contract (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) over the first one's loopback
# MLflow image: the server as manifests/base/mlflow.yaml starts it (basic auth), answering /health and refusing
#   a request without credentials
# IMAGES_FILE (default build/images.txt) names the images; the work folder is build/smoke (removed after).
. "$(dirname "$0")/common.sh"
# shellcheck source=ci/podman.sh
. "$ROOT/ci/podman.sh"
podman_setup
images_file="${IMAGES_FILE:-$BUILD_DIR/images.txt}"
if [ ! -s "$images_file" ]; then
    echo "ci/smoke_images.sh: no images listed in $images_file; run ci/build_images.sh first" >&2
    exit 2
fi
pick() { grep -E "$1" "$images_file" | tail -1 || true; }
component="$(pick '/ctpipe:[^/]+$')"
trainer="$(pick '/ctpipe-trainer:[^/]+-cpu$')"
mlflow_image="$(pick '/ctpipe-mlflow:[^/]+$')"
if [ -z "$component" ] || [ -z "$trainer" ]; then
    echo "ci/smoke_images.sh: $images_file must name the component image and the CPU trainer image" >&2
    exit 2
fi

work="$BUILD_DIR/smoke"
rank0="ctpipe-smoke-rank0-$$"
rank1="ctpipe-smoke-rank1-$$"
as_image_user() { if [ "$(id -u)" -eq 0 ]; then "$@"; else podman unshare "$@"; fi; }
cleanup() {
    # The second rank first: it joined the first one's network namespace.
    podman rm -f "$rank1" >/dev/null 2>&1 || true
    podman rm -f "$rank0" >/dev/null 2>&1 || true
    as_image_user rm -rf "$work"
}
trap cleanup EXIT
as_image_user rm -rf "$work"
mkdir -p "$work/minio" "$work/outputs/validate-data" "$work/outputs/select-checkpoint" "$work/mlflow"
# The volumes belong to the images' user, as a cluster's fsGroup makes them.
as_image_user chown -R 10001:10001 "$work"

# As a cluster runs a pod under Pod Security "restricted": the image's user, nothing writable but the volumes
# (and the tmpfs podman mounts at /tmp with --read-only), no network, no capabilities.
restricted=(--read-only --cap-drop all --security-opt no-new-privileges)
in_pod=(podman run --rm "${restricted[@]}" --network none)
steps=(-v "$ROOT/ci/smoke_steps.py:/ci/smoke_steps.py:ro" -v "$work:/work")
artifacts=/minio/mlpipeline/v2/artifacts/ctpipe-smoke/run-1

check_user() {
    local user
    user="$(podman image inspect --format '{{.Config.User}}' "$1")"
    case "${user%%:*}" in
        ''|0|root) echo "ci/smoke_images.sh: $1 runs as '${user:-root}', not as a non-root user" >&2; exit 1 ;;
    esac
    [ "$("${in_pod[@]}" "$1" id -u)" = "${user%%:*}" ] || { echo "$1: not running as $user" >&2; exit 1; }
}
step() { log "$1"; started=$SECONDS; }
took() { echo "  ok ($((SECONDS - started)) s)" >&2; }

step "component image $component: ctpipe --version, what is installed"
check_user "$component"
"${in_pod[@]}" "$component" ctpipe --version
"${in_pod[@]}" "$component" python -c '
import importlib.metadata as md, importlib.util as iu, torch
names = {d.metadata["Name"].lower() for d in md.distributions()}
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
assert not [n for n in names if n.startswith("nvidia")], "CUDA packages in the component image"
assert iu.find_spec("ctpipe.testing") is None and "pytest" not in names, "test-only code in a runtime image"
print("torch", torch.__version__, "|", len(names), "distributions, none test-only or CUDA")'
took

step "validate_data through KFP's entry point (kfp.dsl.executor_main), as a KFP pod runs it"
"${in_pod[@]}" "${steps[@]}" "$component" python /ci/smoke_steps.py prepare /work
"${in_pod[@]}" "${steps[@]}" "$component" python /ci/smoke_steps.py command validate_data /work
mapfile -d '' -t argv < "$work/validate_data.argv"
"${in_pod[@]}" -v "$work/minio:/minio" -v "$work/data:/data:ro" -v "$work/outputs/validate-data:/tmp/kfp_outputs" \
    "$component" "${argv[@]}" > "$work/validate.log" 2>&1 || { tail -40 "$work/validate.log" >&2; exit 1; }
"${in_pod[@]}" "${steps[@]}" -v "$work/minio:/minio:ro" "$component" python /ci/smoke_steps.py outputs validate_data /work
took

step "trainer image $trainer: two ranks of the worker, the env contract only"
check_user "$trainer"
config="$(cat "$work/config.json")"
worker=(python -m ctpipe.components.steps.train.worker --snapshot "$artifacts/validate-data/snapshot"
        --checkpoints "$artifacts/train/checkpoints" --config-json "$config")
contract=(-e MASTER_ADDR=127.0.0.1 -e MASTER_PORT=29500 -e WORLD_SIZE=2)
podman run -d --name "$rank0" "${restricted[@]}" --network none "${contract[@]}" -e RANK=0 -v "$work/minio:/minio" \
    "$trainer" "${worker[@]}" >/dev/null
# The second rank shares the first one's network namespace: its loopback is the only network either has.
podman run -d --name "$rank1" "${restricted[@]}" --network "container:$rank0" "${contract[@]}" -e RANK=1 \
    -v "$work/minio:/minio" "$trainer" "${worker[@]}" >/dev/null
codes="$(podman wait "$rank0" "$rank1" | tr '\n' ' ')"
if [ "$codes" != "0 0 " ]; then
    for rank in "$rank0" "$rank1"; do echo "--- $rank" >&2; podman logs "$rank" 2>&1 | tail -30 >&2; done
    echo "ci/smoke_images.sh: the training ranks exited with $codes" >&2
    exit 1
fi
podman logs "$rank0" 2>&1 | tail -3
took

step "select_checkpoint through KFP's entry point, and the export loaded (torch.load weights_only)"
"${in_pod[@]}" "${steps[@]}" "$component" python /ci/smoke_steps.py command select_checkpoint /work \
    checkpoints=train/checkpoints snapshot=validate-data/snapshot
mapfile -d '' -t argv < "$work/select_checkpoint.argv"
"${in_pod[@]}" -v "$work/minio:/minio" -v "$work/outputs/select-checkpoint:/tmp/kfp_outputs" \
    "$component" "${argv[@]}" > "$work/select.log" 2>&1 || { tail -40 "$work/select.log" >&2; exit 1; }
"${in_pod[@]}" "${steps[@]}" -v "$work/minio:/minio:ro" "$component" python /ci/smoke_steps.py outputs select_checkpoint /work
"${in_pod[@]}" "${steps[@]}" -v "$work/minio:/minio:ro" -v "$work/data:/data:ro" "$component" \
    python /ci/smoke_steps.py load-export "$artifacts/select-checkpoint/model" /data
took

if [ -n "$mlflow_image" ]; then
    step "MLflow image $mlflow_image: the server with basic auth, as manifests/base/mlflow.yaml starts it"
    check_user "$mlflow_image"
    # shellcheck disable=SC2016  # expanded in the container
    "${in_pod[@]}" -v "$work/mlflow:/mlflow" -e MLFLOW_FLASK_SERVER_SECRET_KEY=smoke-only \
        -e MLFLOW_AUTH_ADMIN_PASSWORD=smoke-only-password "$mlflow_image" sh -ec '
        printf "[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:////mlflow/auth.db\nadmin_username = admin\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\n" > /tmp/basic_auth.ini
        export MLFLOW_AUTH_CONFIG_PATH=/tmp/basic_auth.ini
        mlflow server --app-name basic-auth --host 127.0.0.1 --port 5000 --workers 1 \
            --backend-store-uri sqlite:////mlflow/mlflow.db --serve-artifacts --artifacts-destination /mlflow/artifacts \
            > /tmp/server.log 2>&1 &
        python - <<EOF
import base64, time, urllib.error, urllib.request
for _ in range(120):
    try:
        urllib.request.urlopen("http://127.0.0.1:5000/health", timeout=2)
        break
    except OSError:
        time.sleep(1)
else:
    print(open("/tmp/server.log").read()[-3000:]); raise SystemExit("the MLflow server did not answer /health")
url = "http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1"
# The first API requests are slow on a loaded 2-core machine (10 to 20 s measured): a generous timeout.
try:
    try:
        urllib.request.urlopen(url, timeout=120)
        raise SystemExit("the server answered a request without credentials")
    except urllib.error.HTTPError as err:
        assert err.code == 401, err.code
    auth = base64.b64encode(b"admin:smoke-only-password").decode()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Basic " + auth}), timeout=120) as r:
        assert r.status == 200, r.status
except Exception:
    print(open("/tmp/server.log").read()[-3000:])
    raise
print("MLflow server: /health answered, 401 without credentials, 200 with them")
EOF'
    took
fi

log "images (smoke test passed)"
printf '%-56s %10s  %s\n' IMAGE SIZE USER
while read -r image; do
    printf '%-56s %10s  %s\n' "$image" "$(podman images --format '{{.Size}}' "$image" | head -1)" \
        "$(podman image inspect --format '{{.Config.User}}' "$image")"
done < "$images_file"
