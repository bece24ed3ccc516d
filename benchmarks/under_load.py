"""Benchmark: sweeps on a busy machine (issue 32). The DPO quickstart cut to 3 trials and
the quickstart, each run `--runs` times in a row, with one CPU-bound process per core
running beside them at the lowest priority (`nice -n 19`, started and ended by pid).

Figures per run: the sweep's wall time (bounded by `--timeout`: a run past it counts as
hung), the trials' outcomes, and the placement groups alive over time as a thread in the
driver samples Ray's placement-group table every 0.2 s: the most groups holding CPUs at
once (a group kept by a pruned or paused trial while the next trial's waits is what hung
sweeps before) and how many were left when the sweep ended.

    flock /tmp/sweeper-ray.lock python -m benchmarks.under_load --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from ray.tune import Callback

from benchmarks.common import REPO, machine, print_figures, run_bench_sweep, save_json
from sweeper.cluster import reserving_groups
from sweeper.spec import read_yaml, validate_spec

SWEEPS = {
    "dpo-quickstart, 3 trials": ("dpo-quickstart.yaml", {"search": {"num_trials": 3}}),
    "quickstart": ("quickstart.yaml", {}),
}


class PlacementGroupSampler(Callback):
    """Samples the placement groups holding at least one CPU (placed or waiting) from a
    thread of the driver, from the sweep's start to its end."""

    def __init__(self, every_s: float = 0.2):
        self.every_s, self.most, self.left_at_end = every_s, 0, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def setup(self, **info):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _holding(self) -> int:
        return len(reserving_groups())

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.most = max(self.most, self._holding())

    def on_experiment_end(self, trials, **info):
        self._stop.set()
        self.left_at_end = self._holding()

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the thread is runtime-only.
        return {"every_s": self.every_s, "most": self.most, "left_at_end": self.left_at_end}


def load_beside(cores: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while 1: pass"]) for _ in range(cores)]


def one_run(yaml_name: str, sections: dict, timeout_s: float) -> dict:
    """One sweep in a child process (a hung one is ended by its pid), its figures back as a dict."""
    out = Path(tempfile.mkdtemp(prefix="sweeper-under-load-")) / "figures.json"
    started = time.time()
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.under_load", "--one", yaml_name, json.dumps(sections), str(out)],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        child.wait()
        return {"wall_s": time.time() - started, "hung": True}
    figures = json.loads(out.read_text()) if out.is_file() else {"failed": child.returncode}
    return {"wall_s": time.time() - started, "hung": False, **figures}


def run_one_sweep(yaml_name: str, sections: dict, out: Path) -> None:
    """In the child: the sweep as `sweep start` runs it, with the sampler."""
    path = REPO / "search_spaces" / yaml_name
    raw = read_yaml(path)
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    folder = Path(tempfile.mkdtemp(prefix="sweeper-under-load-sweep-"))
    raw["output_dir"] = str(folder)
    raw.setdefault("tracking", {})["uri"] = f"sqlite:///{folder}/mlflow.db"
    spec = validate_spec(raw, base_dir=path.parent, source=str(path))
    sampler = PlacementGroupSampler()
    run = run_bench_sweep(spec, extra_callbacks=[sampler])
    states = sorted(record.status_text for record in run.book.trials.values())
    out.write_text(json.dumps({"trials": states, "most_groups": sampler.most, "left_at_end": sampler.left_at_end}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600, help="seconds after which a run counts as hung")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        yaml_name, sections, out = args.one
        run_one_sweep(yaml_name, json.loads(sections), Path(out))
        return
    cores = os.cpu_count() or 2
    burners = load_beside(cores)
    rows, figures = [], {"machine": machine(), "load": f"{cores} x nice -n 19 CPU-bound", "runs": {}}
    try:
        for label, (yaml_name, sections) in SWEEPS.items():
            for number in range(1, args.runs + 1):
                result = one_run(yaml_name, sections, args.timeout)
                figures["runs"][f"{label} #{number}"] = result
                outcome = "HUNG (ended at --timeout)" if result["hung"] else (
                    ", ".join(f"{n} {state}" for state, n in sorted(Counter(result["trials"]).items()))
                    if "trials" in result else f"exit {result.get('failed')}")
                rows.append((f"{label}, run {number}", f"{result['wall_s']:.0f} s", (
                    f"most CPU placement groups at once {result.get('most_groups', '-')}, left at end "
                    f"{result.get('left_at_end', '-')}; {outcome}")))
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print_figures(f"Sweeps beside {cores} low-priority CPU-bound processes ({machine()})", rows)
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
