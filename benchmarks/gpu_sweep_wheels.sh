#!/usr/bin/env bash
# Fetch, here (with PyPI), the wheels `sweep start` needs on the GPU machine (Python 3.12,
# torch, transformers, peft and accelerate there; no Ray, Optuna, MLflow, pydantic, polars,
# rich or typer), and lay them out in parts that each fit one device command:
#     bash benchmarks/gpu_sweep_wheels.sh [MiB per part, default 58]
# Resolves ray[default,train,tune], optuna, mlflow-skinny (its SQL tracking store is what a
# sweep writes; the full mlflow adds its server and UI), pydantic, polars, rich and typer at
# this environment's versions for cp312 manylinux x86_64, leaves out what torch,
# transformers, peft and accelerate bring, downloads the rest (--no-deps), cuts Ray's wheel
# (over 64 MiB alone) in two halves, and packs everything into build/whl-sweep/part-N/
# (ignored by .gitignore, so the device tool carries it when named). On the machine, with
# every part carried:
#     cat build/whl-sweep/part-*/ray-*.whl.half-a build/whl-sweep/part-*/ray-*.whl.half-b > /tmp/ray-...whl
# then pip install --no-index --no-deps --target /tmp/site the wheels and that one.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
limit_mib="${1:-58}"
rm -rf build/whl-sweep /tmp/sweeper-sweep-wheels
mkdir -p build/whl-sweep /tmp/sweeper-sweep-wheels
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
platform=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip install -q --dry-run --ignore-installed "${platform[@]}" --target /tmp/sweeper-sweep-wheels/never \
    --report /tmp/sweeper-sweep-wheels/report.json \
    "ray[default,train,tune]==$(version ray)" "optuna==$(version optuna)" "mlflow-skinny==$(version mlflow-skinny)" \
    "pydantic==$(version pydantic)" "polars==$(version polars)" "rich==$(version rich)" "typer==$(version typer)" \
    "pyyaml" "filelock" "psutil" 2>&1 | grep -v "is ignored" || true
python3 - "$limit_mib" <<'PY'
import importlib.metadata as metadata
import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

MIB = 1024**2
limit = float(sys.argv[1]) * MIB
work = Path("/tmp/sweeper-sweep-wheels")
report = json.loads((work / "report.json").read_text())


def canonical(name: str) -> str:
    return name.lower().replace("_", "-")


def closure(names: list[str]) -> set[str]:
    """What the machine's stack brings, as this environment's metadata says."""
    seen, stack = set(), list(names)
    while stack:
        name = canonical(stack.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(requirement.name)
    return seen


there = closure(["torch", "transformers", "peft", "accelerate"])
# The machine's transformers may be older than ours: these it may lack, so they travel.
there -= {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "rich", "typer", "shellingham",
          "markdown-it-py", "mdurl", "pygments"}
wanted = [(canonical(item["metadata"]["name"]), item["metadata"]["version"]) for item in report["install"]]
wanted = [(name, version) for name, version in wanted if name not in there]
(work / "wanted.txt").write_text("".join(f"{name}=={version}\n" for name, version in wanted))
subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                "-d", str(work / "wheels"), "-r", str(work / "wanted.txt")], check=True)
files = []
for wheel in sorted((work / "wheels").glob("*.whl")):
    data = wheel.read_bytes()
    if len(data) > limit:  # Ray: in halves, joined on the machine with cat
        middle = len(data) // 2
        for suffix, part in (("a", data[:middle]), ("b", data[middle:])):
            half = work / f"{wheel.name}.half-{suffix}"
            half.write_bytes(part)
            files.append(half)
        wheel.unlink()
    else:
        files.append(wheel)
files.sort(key=lambda path: -path.stat().st_size)
parts: list[list[Path]] = []
for path in files:  # first fit, largest first
    size = path.stat().st_size
    for part in parts:
        if sum(p.stat().st_size for p in part) + size <= limit:
            part.append(path)
            break
    else:
        parts.append([path])
for number, part in enumerate(parts, start=1):
    folder = Path("build/whl-sweep") / f"part-{number}"
    folder.mkdir(parents=True)
    for path in part:
        path.rename(folder / path.name)
    names = ", ".join(p.name.split("-")[0] for p in part[:4]) + (f", ... ({len(part)} files)" if len(part) > 4 else "")
    print(f"part-{number}: {sum((folder / p.name).stat().st_size for p in part) / MIB:6.1f} MiB  {names}")
total = sum(p.stat().st_size for p in Path("build/whl-sweep").rglob("*") if p.is_file())
print(f"{len(wanted)} wheels, {total / MIB:.1f} MiB in {len(parts)} parts of at most {limit / MIB:.0f} MiB (build/whl-sweep/)")
PY
rm -rf /tmp/sweeper-sweep-wheels
