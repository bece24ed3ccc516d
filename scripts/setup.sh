#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv. Idempotent and quick
# when nothing changed. Without a GPU it installs PyTorch's CPU build first, so that the
# torch requirement does not pull several GB of CUDA packages.
#   TORCH_INDEX_URL  optional package index for the CPU build of torch (e.g. PyTorch's
#                    own CPU index) where the default index would serve a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=".venv/.sweeper-installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi

python -m pip install --quiet --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: GPU found, installing torch with CUDA"
    python -m pip install --quiet "torch==2.13.0"
  else
    echo "setup: no GPU, installing the CPU build of torch"
    python -m pip install --quiet "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  fi
fi
echo "setup: installing sweeper and its dependencies into .venv"
# DeepSpeed (resources.strategy: deepspeed) builds no ops at install time: on CPUs it
# JIT-builds the one it needs with the system C++ compiler, on GPUs its CUDA ops as used.
DS_BUILD_OPS=0 python -m pip install --quiet -e ".[dev,deepspeed,quantization]"
rm -f .venv/.sweeper-installed-*
touch "$stamp"
