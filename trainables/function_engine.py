"""One trial on the user's own training function (trainer: function): import
function.entry_point, call it with the trial's config and a `TrialReporter`, and fail the
trial if it returned without a report. The contract is docs/guides/engines.md; the
examples are examples/engines/.

Same signature as trainables/sft.py::train.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from trainables.common import REPORT_FILE, Reporter
from trainables.config import TrialConfig
from trainables.engines import load_entry_point
from trainables.metrics import STEP
from trainables.preemption import NO_NOTICE, PreemptionNotice

__all__ = ["train", "TrialReporter", "NoReport", "trial_dict"]


class NoReport(RuntimeError):
    """The function returned without reporting: the trial has nothing to rank it by."""


class TrialReporter:
    """What a training function gets beside its config.

    - `report(metrics, step, checkpoint_dir=None)`: one evaluation at optimizer step
      `step` (metrics under the sweep's names: eval_loss, ...; search.metric among them),
      with a folder to keep as the trial's checkpoint; each step once, in order. Step 0
      is an evaluation before the first step (a Trainer's eval_on_start): recorded and
      shown, never ranked at a rung.
    - `should_stop()`: True once the trial has reported training.max_steps (its budget).
      A trial that ASHA pauses or prunes is ended by Ray: the function needs no check.
    - `resume_from`: the folder of the trial's latest checkpoint when it continues (a
      promoted, retried or resumed trial), else None.
    - `data`: the `data` section read and tokenized as the built-in loop trains on it
      ("train", "eval": rows of `input_ids` and `labels`).
    - `callback()`: a transformers TrainerCallback that reports a Hugging Face
      Trainer's evaluations and checkpoints (evaluate and save every training.eval_every).
    """

    def __init__(self, report: Reporter, config: TrialConfig, data: dict, resume_from: str | None, started_at: float):
        self._report = report
        self._config = config
        self._started_at = started_at
        self.data = data
        self.resume_from = resume_from
        self.last_step: int | None = _step_of(resume_from)
        self.reports = 0

    def report(self, metrics: dict[str, float], step: int, checkpoint_dir: str | None = None) -> None:
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"reporter.report: step must be an optimizer step >= 0 (0: an evaluation before the "
                             f"first step), got {step!r}")
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"reporter.report: step {step} comes after step {self.last_step}; report each step once, in order")
        values = {}
        for name, value in metrics.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"reporter.report: {name} must be a finite number, got {value!r}")
            values[name] = float(value)
        values = {STEP: step, **values}
        if checkpoint_dir is not None:
            if not os.path.isdir(checkpoint_dir):
                raise ValueError(f"reporter.report: checkpoint_dir {checkpoint_dir} is not a folder")
            with open(os.path.join(checkpoint_dir, REPORT_FILE), "w") as file:
                json.dump(values, file)
        self._report(values, checkpoint_dir)
        self.last_step = step
        self.reports += 1

    def should_stop(self) -> bool:
        return self.last_step is not None and self.last_step >= self._config.training.max_steps

    def callback(self):
        from trainables.hf_reporting import ReportEvaluations

        reporter = self

        def report(metrics: dict, checkpoint_dir: str | None) -> None:
            metrics = dict(metrics)
            reporter.report(metrics, int(metrics.pop(STEP)), checkpoint_dir)

        training = self._config.training
        return ReportEvaluations(report, training.max_steps, self._started_at, eval_every=training.eval_every)


def trial_dict(config: TrialConfig, model_source: str) -> dict[str, Any]:
    """The trial's config as the function gets it: every section as plain values, its
    sampled values applied, and `model_source` (the folder or hub id the base model
    loads from: the built-in model's folder once built)."""
    return {**config.model_dump(mode="json"), "model_source": model_source}


def train(
    config: TrialConfig,
    data: dict,
    model_source: str,
    report: Reporter,
    started_at: float,
    resume_from: str | None = None,
    memory_forecast_gib: float | None = None,
    preemption: PreemptionNotice = NO_NOTICE,
) -> None:
    """Run function.entry_point for this trial. NoReport when it returned without a report."""
    entry_point = config.function.entry_point
    function = load_entry_point(entry_point)
    reporter = TrialReporter(report, config, data, resume_from, started_at)
    function(trial_dict(config, model_source), reporter)
    if reporter.reports == 0 and not reporter.should_stop():
        raise NoReport(
            f"function.entry_point: {entry_point} returned without calling reporter.report(metrics, step); "
            "a trial reports at least its last evaluation"
        )


def _step_of(checkpoint_dir: str | None) -> int | None:
    """The step a checkpoint's report was taken at (None: no checkpoint, or no report in it)."""
    if checkpoint_dir is None:
        return None
    path = os.path.join(checkpoint_dir, REPORT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as file:
        return int(json.load(file).get(STEP, 0)) or None
