"""What a calibration cannot see, as this machine showed it in its last sweeps.

The calibration (sweeper/plan/calibrate.py) times a training loop's steps, evaluations and
setup with copies side by side, before the sweep. It does not see what the sweep adds on
the same cores: the driver's Tune loop, MLflow logging, Ray's own processes, each report's
way to the driver, a Train run's worker group, a trial's stop, a slot's turnaround, the
first wave's cold start. Those were constants measured on one 2-core machine
(sweeper/cost/throughput.py), and a forecast built on them was 18-45 % low on another
machine of the same size.

The live forecast measures all of them while a sweep runs (sweeper/run/live_forecast.py).
When a calibrated sweep ends, what it measured is kept here as one `SweepMeasure`, per
machine (`machine_key`: the driver's host and the cluster it ran on) and sweep shape
(`sweep_shape`: task, workers per trial, trials at once, steps and evaluation interval);
the next calibrated forecast of a sweep of that shape on that machine (`sweep plan`,
`sweep start`) applies the median of its last `KEPT` sweeps (`MachineProfile.applied`):
the calibrated step and evaluation times times what the sweeps measured over what their
calibration said; Ray's part of a start, the stop, the turnaround and the cold start as
measured; a trial's speed when it trains alone (the slots' other runs ended); and the
wall time times what the forecast's slot arithmetic missed at the sweep's own figures.

Why per shape, not per machine: on the 2-core machine steps ran at 1.2-1.5x the
calibration's in the 90-step quickstart (a neighbour's start or evaluation beside most
steps) and at 1.06-1.17x in a sweep of 1,800 steps, and evaluations at 1.3-1.6x with one
worker per trial against 0.7-0.8x with two; a median across shapes fitted none of them.
The measured stop and turnaround (0.07-0.1 s) are smaller than the constants (0.3, 0.5 s),
which had absorbed what the calibration misses of the steps and evaluations, so they only
hold together with that sweep's step and evaluation ratios. The first sweep of a shape on a machine has no profile: `sweep start`
measures Ray's part of a trial (its start, stop and turnaround, and a training thread's
share of a core there) with empty trials before its forecast (sweeper/run/ray_part.py);
`sweep plan` takes all from the constants; each says which.

Kept under `~/.cache/sweeper/machines/` (`SWEEPER_MACHINE_PROFILES` names another folder),
one JSON file per machine.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS, TrialTiming
from sweeper.plan.live import Measured
from trainables.environment import CACHE_ROOT

__all__ = ["SweepMeasure", "MachineProfile", "machine_key", "sweep_shape", "profiles_folder", "KEPT"]

# The last sweeps of a shape a profile keeps; their median is applied, so that one sweep
# run under a passing load moves no figure on its own.
KEPT = 5
# Sweeps kept per machine, all shapes together.
MOST_KEPT = 200

PROFILES_ENV = "SWEEPER_MACHINE_PROFILES"


def profiles_folder() -> Path:
    folder = os.environ.get(PROFILES_ENV)
    return Path(folder) if folder else CACHE_ROOT / "machines"


def machine_key(cluster, *, on_cluster: bool) -> str:
    """The machine a forecast is for: this host and its GPUs for a local cluster; this host
    (the driver) and the cluster's shape for a cluster at an address."""
    host = socket.gethostname()
    if not on_cluster:
        return f"{host}-local-{cluster.gpus:g}gpu"
    return f"{host}-cluster-{cluster.cpus:g}cpu-{cluster.gpus:g}gpu-{cluster.max_node_cpus:g}pernode"


def sweep_shape(plan) -> str:
    """What makes a sweep's figures differ from its calibration's on one machine: what a
    step is (the task), how many workers share the node, and how a trial's time divides
    between steps, evaluations and starts."""
    training = plan.spec.training
    return (
        f"{plan.spec.task}, {plan.trial_resources.workers} worker(s) per trial, {plan.concurrent_trials} at once, "
        f"{training.max_steps} steps evaluated every {training.eval_every}"
    )


@dataclass(frozen=True)
class SweepMeasure:
    """What one sweep measured that its calibration could not (None: not measured)."""

    sweep: str
    ended_at: float  # time.time()
    step_ratio: float | None  # the sweep's seconds per step over the calibration's
    eval_ratio: float | None  # the same per evaluation (with the report's way to the driver)
    ray_start_seconds: float | None  # a Train run's start less the loop's calibrated setup
    stop_seconds: float | None  # a run's last report to its end
    turnaround_seconds: float | None  # a run's end to the next run's start on the slot
    cold_start_seconds: float | None  # what a first-wave start took more than a later one
    shape: str = ""  # `sweep_shape`
    wall_ratio: float | None = None  # the sweep's wall over the slot arithmetic's at its measured figures
    alone_ratio: float | None = None  # a trial's time alone over its time beside others

    @classmethod
    def of(
        cls, sweep: str, shape: str, calibrated: TrialTiming, measured: Measured, wall_ratio: float | None = None
    ) -> "SweepMeasure | None":
        """From the live forecast's sums (`measured`) against the calibration's figures
        (`calibrated`, before any profile), and the sweep's `wall_ratio`; None when the
        sweep measured no interval."""
        if measured.steps == 0 or measured.evaluations == 0:
            return None

        def mean(total: float, count: int) -> float | None:
            return total / count if count else None

        def ratio(value: float | None, prior: float) -> float | None:
            return value / prior if value is not None and prior > 0 else None

        alone_ratio = None
        if measured.alone_evaluations and measured.evaluations:
            beside_others = measured.alone_beside_others(
                measured.train_seconds / measured.steps, measured.eval_seconds / measured.evaluations
            )
            alone_ratio = measured.alone_seconds / beside_others if beside_others > 0 else None
        warm_start = mean(measured.start_seconds, measured.starts)
        cold_start = mean(measured.cold_start_seconds, measured.cold_starts)
        loop_setup = max(0.0, calibrated.setup_seconds - RAY_TRIAL_START_SECONDS)
        return cls(
            sweep=sweep,
            ended_at=time.time(),
            step_ratio=ratio(measured.train_seconds / measured.steps, calibrated.step_seconds),
            eval_ratio=ratio(measured.eval_seconds / measured.evaluations, calibrated.eval_seconds),
            ray_start_seconds=None if warm_start is None else max(0.0, warm_start - loop_setup),
            stop_seconds=mean(measured.stop_seconds, measured.stops),
            turnaround_seconds=mean(measured.turnaround_seconds, measured.turnarounds),
            cold_start_seconds=None if warm_start is None or cold_start is None else max(0.0, cold_start - warm_start),
            shape=shape,
            wall_ratio=wall_ratio,
            alone_ratio=alone_ratio,
        )


@dataclass(frozen=True)
class MachineProfile:
    """The sweeps of one shape on one machine that a forecast applies."""

    key: str
    shape: str
    sweeps: tuple[SweepMeasure, ...]  # oldest first, at most KEPT

    @classmethod
    def load(cls, key: str, shape: str) -> "MachineProfile | None":
        """The last KEPT sweeps of `shape` kept for `key`; None when none has ended there (or
        the file is unreadable: a forecast never fails on it)."""
        sweeps = tuple(s for s in _read(key) if s.shape == shape)[-KEPT:]
        return cls(key, shape, sweeps) if sweeps else None

    @classmethod
    def add(cls, key: str, measure: SweepMeasure) -> "MachineProfile":
        """`measure` kept as the newest of `key`'s sweeps of its shape (the oldest of that
        shape beyond KEPT dropped, and the oldest of all beyond MOST_KEPT)."""
        sweeps = [*_read(key), measure]
        of_shape = [s for s in sweeps if s.shape == measure.shape]
        sweeps = [s for s in sweeps if s.shape != measure.shape or s in of_shape[-KEPT:]][-MOST_KEPT:]
        path = _path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: a forecast reading at the same time sees the old or the new.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as file:
            json.dump({"machine": key, "sweeps": [asdict(s) for s in sweeps]}, file, indent=1)
        os.replace(file.name, path)
        return cls.load(key, measure.shape)

    def figure(self, name: str) -> float | None:
        """The median of `name` over the sweeps that measured it."""
        values = [getattr(s, name) for s in self.sweeps if getattr(s, name) is not None]
        return statistics.median(values) if values else None

    def applied(self, timing: TrialTiming) -> TrialTiming:
        """A calibrated `timing` as this machine's sweeps of the shape ran it."""

        def figure(name: str, default: float) -> float:
            value = self.figure(name)
            return default if value is None else value

        ray_start = figure("ray_start_seconds", RAY_TRIAL_START_SECONDS)
        return replace(
            timing,
            step_seconds=timing.step_seconds * figure("step_ratio", 1.0),
            eval_seconds=timing.eval_seconds * figure("eval_ratio", 1.0),
            setup_seconds=max(0.0, timing.setup_seconds - RAY_TRIAL_START_SECONDS) + ray_start,
            stop_seconds=figure("stop_seconds", timing.stop_seconds),
            turnaround_seconds=figure("turnaround_seconds", timing.turnaround_seconds),
            cold_start_seconds=figure("cold_start_seconds", timing.cold_start_seconds),
            wall_ratio=figure("wall_ratio", 1.0),
            alone_ratio=figure("alone_ratio", 1.0),
            source=f"{timing.source}; as this machine's last {len(self.sweeps)} sweep(s) of its shape ran it",
        )

    def line(self) -> str:
        """What the profile applies, for `sweep plan`'s "Measured" line."""
        parts = []
        labels = {
            "ray_start_seconds": "Ray's part of a trial start ({:.1f} s)",
            "stop_seconds": "a trial's stop ({:.1f} s)",
            "turnaround_seconds": "a slot's turnaround ({:.1f} s)",
            "cold_start_seconds": "the first wave's cold start ({:.1f} s)",
            "step_ratio": "steps in a sweep x{:.2f}",
            "eval_ratio": "evaluations in a sweep x{:.2f}",
            "alone_ratio": "a trial alone in x{:.2f} of its time beside others",
            "wall_ratio": "the wall time x{:.2f} of the slot arithmetic's",
        }
        missing = False
        for name, label in labels.items():
            value = self.figure(name)
            if value is not None:
                parts.append(label.format(value))
            # A sweep with no interval trained alone (one slot; none ended early) has nothing to say there.
            missing = missing or (value is None and name != "alone_ratio")
        count = len(self.sweeps)
        sweeps = f"{count} sweep{'s' if count > 1 else ''}"
        line = f"on this machine's last {sweeps} of this shape (median): {', '.join(parts)}"
        if missing:
            line += "; the rest as modelled constants"
        return line


def _read(key: str) -> list[SweepMeasure]:
    try:
        return [SweepMeasure(**record) for record in json.loads(_path(key).read_text())["sweeps"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _path(key: str) -> Path:
    return profiles_folder() / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', key)}.json"
