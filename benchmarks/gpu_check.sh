#!/usr/bin/env bash
# The GPU check on the GPU machine, from the repository root:
#     bash benchmarks/gpu_check.sh "$OUT" [gpu_check.py options, e.g. --lines sft_1b,oom]
# Installs the wheels that travelled in .whl/ (benchmarks/gpu_wheels.sh fetched them; the
# machine has torch, transformers, peft and accelerate, but no pydantic) into /tmp/site,
# puts it and the repository on PYTHONPATH, prints the GPU, and runs benchmarks/gpu_check.py
# into OUT (gpu_check.md, gpu_check.json, gpu_check.log). GPU_CHECK_MACHINE_STACK=1 keeps
# the machine's own transformers and peft (installs every other wheel): the second try
# where ours do not import on the machine's torch.
set -euo pipefail
out="${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR [gpu_check.py options]}"
shift
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    wheels=(.whl/*.whl)
    if [ "${GPU_CHECK_MACHINE_STACK:-0}" = 1 ]; then
        wheels=($(ls .whl/*.whl | grep -v -E '/(transformers|peft)-'))
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 benchmarks/gpu_check.py "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
