#!/usr/bin/env bash
# The causal_lm task's GPU figures: the ctpipe trainer against a bare FSDP2 loop of the gpt-350m decoder
# (303.5 M parameters, context 1024), bf16, one GPU, and its MFU against the GPU's bf16 datasheet peak.
#
#     bash benchmarks/gpu_lm.sh [OUT_DIR]
#
# Runs from a checkout on a machine with torch and CUDA; needs neither MLflow nor an install of ctpipe
# (--no-mlflow: rank 0 logs nowhere; PYTHONPATH is the checkout). Each batch size is one JSON line in
# OUT_DIR/gpu_lm_b<batch>.log (last line), with nvidia-smi's view of the card first. GPU_LM_BATCHES (default
# "8 16"), GPU_LM_STEPS (60) and GPU_LM_TIMEOUT (seconds per batch size, 240) change the runs. The
# worker's FLOP probe runs one forward on the CPU: all the host's cores for it (train.threads_per_worker).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
for batch in ${GPU_LM_BATCHES:-8 16}; do
    timeout "${GPU_LM_TIMEOUT:-240}" python3 benchmarks/trainer.py --task causal_lm --no-mlflow --no-ddp --repeats 1 \
        --set task.options.size=gpt-350m --set train.mixed_precision=bf16 --set train.workers=1 \
        --set train.batch_size="$batch" --set train.max_steps="${GPU_LM_STEPS:-60}" --set train.warmup_steps=5 \
        --set train.threads_per_worker="$(nproc)" \
        2>&1 | tee "$out/gpu_lm_b$batch.log" | grep -v '^\s*$' | tail -4
done
