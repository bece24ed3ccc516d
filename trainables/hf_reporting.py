"""A transformers `TrainerCallback` that turns a Hugging Face Trainer's evaluations and
checkpoints into the sweep's reports: the trl engine (trainables/trl_engine.py) uses it,
and so can a function of `trainer: function` that runs its own `Trainer`
(examples/engines/hf_trainer.py).

At every evaluation the Trainer logs, evaluates, then saves a checkpoint (its own:
adapter or weights, optimizer, schedule, random state, trainer_state.json); the callback
reports once that checkpoint is written, with the metrics under the sweep's names
(trainables/metrics.py) and the checkpoint folder, so a paused, retried or resumed trial
goes on from it with `Trainer.train(resume_from_checkpoint=...)`.

An evaluation before the first step (`eval_on_start`, e.g. trl.eval_on_start) is reported
at once as step 0, the eval metrics alone and no checkpoint: nothing has trained. The
Trainer runs it at the start of every `train()`, a resumed one's too; there it repeats the
evaluation of the checkpoint it resumes from, whose report was given, and is dropped (the
trl engine turns eval_on_start off when it resumes, so that it is not run at all). The
random states are put back as they were before it: GRPO's evaluation samples completions,
and the trial then trains as the same seed trains without it.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Callable

from transformers import TrainerCallback

from trainables.common import REPORT_FILE
from trainables.metrics import (
    EVAL_COMPLETION_LENGTH, EVAL_FRAC_REWARD_ZERO_STD, EVAL_KL, EVAL_REWARD, EVAL_REWARD_STD, TRAIN_REWARD, reward_metric,
    EVAL_LOSS, EVAL_PERPLEXITY, EVAL_REWARDS_ACCURACY, EVAL_REWARDS_CHOSEN, EVAL_REWARDS_MARGIN,
    EVAL_REWARDS_REJECTED, FIRST_STEP_SECONDS, LEARNING_RATE, SETUP_SECONDS, STEP, TOKENS_PER_SECOND, TRAIN_CPU_SHARE, TRAIN_LOSS,
    TRAIN_SECONDS, TRAIN_TOKENS,
)
from trainables.random_states import process_random_states, set_process_random_states

__all__ = ["ReportEvaluations", "sweep_metrics"]

# trl's and transformers' names of evaluation metrics -> the sweep's.
_EVAL_NAMES = {
    "eval_loss": EVAL_LOSS,
    "eval_rewards/chosen": EVAL_REWARDS_CHOSEN,
    "eval_rewards/rejected": EVAL_REWARDS_REJECTED,
    "eval_rewards/margins": EVAL_REWARDS_MARGIN,
    "eval_rewards/accuracies": EVAL_REWARDS_ACCURACY,
    # GRPOTrainer's (trainables/grpo.py); its per-function eval_rewards/<fn>/mean below.
    "eval_reward": EVAL_REWARD,
    "eval_reward_std": EVAL_REWARD_STD,
    "eval_frac_reward_zero_std": EVAL_FRAC_REWARD_ZERO_STD,
    "eval_kl": EVAL_KL,
    "eval_completions/mean_length": EVAL_COMPLETION_LENGTH,
    "reward": TRAIN_REWARD,
}


def sweep_metrics(trainer_metrics: dict) -> dict:
    """A Trainer's evaluation metrics under the sweep's names (eval_loss, the rewards of
    the preference methods, GRPO's reward and its diagnostics, each reward function's mean
    as eval_reward_<function>), with eval_perplexity from an SFT eval_loss; the Trainer's
    others (runtime, entropy, ...) are left out."""
    metrics = {
        _EVAL_NAMES[name]: float(value) for name, value in trainer_metrics.items()
        if name in _EVAL_NAMES and isinstance(value, (int, float))
    }
    metrics.update({
        reward_metric(name[len("eval_rewards/"):-len("/mean")]): float(value) for name, value in trainer_metrics.items()
        if name.startswith("eval_rewards/") and name.endswith("/mean") and isinstance(value, (int, float))
    })
    if EVAL_LOSS in metrics and EVAL_REWARDS_CHOSEN not in metrics and EVAL_REWARD not in metrics:  # a language-model loss
        metrics[EVAL_PERPLEXITY] = math.exp(min(metrics[EVAL_LOSS], 50.0))
    return metrics


class ReportEvaluations(TrainerCallback):
    """Calls `report(metrics, checkpoint_dir)` once per evaluation, after the Trainer has
    saved that step's checkpoint. The Trainer should evaluate and save at the same steps
    (eval_steps == save_steps == eval_every); the last step is evaluated and saved too.

    `report`: the sweep's reporter (ray.train.report inside a trial); `max_steps`: the
    trial's budget; `started_at`: when the trial started (time.time()), for setup_seconds;
    `is_main`: whether this process writes the checkpoint (rank 0)."""

    def __init__(self, report: Callable[[dict, "str | None"], None], max_steps: int, started_at: float,
                 is_main: bool = True, eval_every: int | None = None):
        self.report = report
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.started_at = started_at
        self.is_main = is_main
        self.setup_seconds: float | None = None
        self.first_step_seconds = 0.0
        self.pending: dict = {}
        self.train_losses: list[float] = []
        self.learning_rate: float | None = None
        self.seconds = self.cpu_seconds = 0.0
        self.tokens_at_report = 0
        self._step_started = self._cpu_started = 0.0
        self._stepped = False  # a step has ended in this train() call
        self._random_states: tuple | None = None  # at the start of a train() call from step 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._stepped = False
        self._random_states = process_random_states() if state.global_step == 0 else None
        self.tokens_at_report = int(getattr(state, "num_input_tokens_seen", 0) or 0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started, self._cpu_started = time.perf_counter(), time.thread_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds += time.perf_counter() - self._step_started
        self.cpu_seconds += time.thread_time() - self._cpu_started
        self._stepped = True
        if self.setup_seconds is None:
            self.setup_seconds = time.time() - self.started_at
            self.first_step_seconds = self.seconds
        at_an_evaluation = self.eval_every is not None and state.global_step % self.eval_every == 0
        if state.global_step >= self.max_steps or at_an_evaluation:
            control.should_log = control.should_evaluate = control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs:
            self.train_losses.append(float(logs["loss"]))
        if "learning_rate" in logs:
            self.learning_rate = float(logs["learning_rate"])
        self.pending.update(sweep_metrics(logs))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.pending.update(sweep_metrics(metrics or {}))
        if self._stepped:
            return
        # Before any step of this train() call: eval_on_start. At step 0 the base model's
        # evaluation, reported now (no save follows it); at a resumed run's start (its
        # checkpoint's step), a repeat of the evaluation that checkpoint was reported with: dropped.
        if state.global_step == 0 and self.pending:
            self.report({STEP: 0, **self.pending}, None)
        if self._random_states is not None:
            set_process_random_states(self._random_states)
        self.pending = {}

    def on_save(self, args, state, control, **kwargs):
        if not self.pending:
            return  # a save without an evaluation (the Trainer's own schedule): not a report
        step = state.global_step
        tokens = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        metrics = {
            STEP: step,
            **self.pending,
            TRAIN_SECONDS: self.seconds,
            TRAIN_CPU_SHARE: self.cpu_seconds / self.seconds if self.seconds else 0.0,
            SETUP_SECONDS: self.setup_seconds or 0.0,
            FIRST_STEP_SECONDS: self.first_step_seconds,
        }
        if tokens > self.tokens_at_report and self.seconds:  # a Trainer that counts its input tokens
            metrics[TRAIN_TOKENS] = tokens - self.tokens_at_report
            metrics[TOKENS_PER_SECOND] = (tokens - self.tokens_at_report) / self.seconds
        if self.train_losses:
            metrics[TRAIN_LOSS] = sum(self.train_losses) / len(self.train_losses)
        if self.learning_rate is not None:
            metrics[LEARNING_RATE] = self.learning_rate
        checkpoint_dir = os.path.join(args.output_dir, f"checkpoint-{step}")
        if self.is_main and os.path.isdir(checkpoint_dir):
            with open(os.path.join(checkpoint_dir, REPORT_FILE), "w") as file:
                json.dump(metrics, file)
        self.report(metrics, checkpoint_dir if self.is_main and os.path.isdir(checkpoint_dir) else None)
        self.pending, self.train_losses = {}, []
        self.seconds = self.cpu_seconds = 0.0
        self.tokens_at_report = tokens

