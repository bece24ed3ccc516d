#!/usr/bin/env bash
# Fetch, here (with PyPI), the wheels the GPU check needs on the GPU machine into .whl/ of
# the repository root, ignored by git, and check that what travels fits one command:
#     bash benchmarks/gpu_wheels.sh [--no-bitsandbytes]
# The machine (Python 3.12, torch 2.11, transformers 5.17, peft, accelerate) lacks pydantic,
# which the trial config needs; our transformers and peft travel too (our code calls
# transformers' activation_checkpointing_enable); bitsandbytes (41 MiB) for the QLoRA line
# unless --no-bitsandbytes. Versions are this environment's, so the check runs ours.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")" .whl
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
names=(pydantic pydantic-core annotated-types typing-inspection typing-extensions transformers peft)
[ "${1:-}" = "--no-bitsandbytes" ] || names+=(bitsandbytes)
for name in "${names[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$name==$(version "$name")"
done
python3 - <<'PY'
import subprocess
from pathlib import Path

MIB = 1024**2
wheels = sorted(Path(".whl").glob("*.whl"))
tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout.split(b"\0")
untracked = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"], capture_output=True,
                           check=True).stdout.split(b"\0")
tree = sum(Path(p.decode()).stat().st_size for p in tracked + untracked if p and Path(p.decode()).is_file())
for wheel in wheels:
    print(f"{wheel.stat().st_size / MIB:7.2f} MiB  {wheel.name}")
total = tree + sum(w.stat().st_size for w in wheels)
print(f"{tree / MIB:7.2f} MiB  the working tree (tracked and untracked, not ignored)")
print(f"{total / MIB:7.2f} MiB  in all, of the 64 MiB one command carries")
raise SystemExit(0 if total < 64 * MIB else "over 64 MiB: run again with --no-bitsandbytes (QLoRA is then skipped)")
PY
