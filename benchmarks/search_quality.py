"""Benchmark 5, search quality: the config a method finds for the steps it spends, on
tasks whose early ranks mislead to different degrees, over several seeds.

Each task (`--task`, TASKS) is built at run time, deterministically: a base of the tiny
Llama's shape (`trainables.tiny.build`, `--base-shape`) pretrained briefly (full weights,
`--base-steps`) on chat text of four task families (sort letters, reverse words, add
three-digit numbers, count a letter), then fine-tuned with LoRA (`--train-examples`) on
new examples of the same families (`--sft same`) or on three families the base never saw
(`--sft new`). The space (`--space`, SPACES) is learning rate log [1e-5, 1e-1], `lora.r`,
`lora.alpha_per_rank` and `training.warmup_ratio` up to 0.2 (more warmup steps than the
first rung), or the same with the learning rate over [1e-4, 1e-1] (the misleading task:
no trial too slow to move) or [1e-4, 1e-2]. The benchmark prints each task's rank
correlation by rung: Spearman, over random search's trials, between a trial's eval loss
at each rung of the ladder (9, 27, 81) and at max_steps (243).

Methods, on the same space and seeds:
- random: random search, every trial to max_steps (in this process, no Ray); its
  evaluations give the rank correlations;
- optuna: the loop a user writes by hand, in this process, one trial at a time:
  Optuna TPE (seeded) + MedianPruner(n_warmup_steps=27) (`--loop-warmup`), `trial.report`
  at every evaluation; at least `--trials` trials and until it has trained random
  search's steps (`--loop-share`);
- the sweeper's schedulers through `sweeper.run.run_sweep` (as `sweep start` runs
  them): `asha` is the sweeper's default (one rung keeping a quarter: step 9 with a trial
  count), `asha_ladder` (rungs 9, 27, 81 keeping a third, 4 startup trials) and
  `asha_keep2_spacing4` (rungs 9, 36, 144 keeping half) the ladders the docs compare it
  with, `asha_stopping` and `median` the other schedulers, and `asha_budget10` ...
  `asha_budget100` the default with no trial count until a `budget.max_steps` cap of
  0.1x, 0.25x, 0.5x and 1x random search's steps (its first rung then at step 27);
- prior: issue 78's candidate, the default's sweep with each new trial's config drawn from
  a prior built from `sweep init`'s sourced ranges with a chance that falls as trials accrue
  (PriorSampler; benchmarks/README.md: a tie with the default, not made the default).

The anytime comparison: each method's best-so-far at 0.1x, 0.25x, 0.5x and 1x of random
search's steps, seed by seed; for each method that trained to 1x, the best at 1x minus
the best at 0.5x (does more compute buy a better config?); each budget-capped default
minus the loop at the same steps; the task's headroom (random search's median trial minus
its best); with `--plot`, the curves.

Defaults: 27 trials of at most 243 steps, evaluated every 9, enough steps after the
ladder's last rung (81) for the methods to separate.

The real task (`--task real`): a pretrained chat model instead of a tiny base built here,
search_spaces/smollm2-cpu.yaml's model (SmolLM2-135M-Instruct), data, batch, eval sample
and generation, and its space (learning rate and LoRA rank). Every trial that reaches
max_steps answers the YAML's generation sample, so each method also reports the best
exact match it found, and the benchmark the untrained model's eval loss and exact match
on the same rows (what the search improves over) and the rank correlation between a
trial's eval loss at each rung and its exact match at the end. Its size (TASKS) is one a
2-core CPU runs: 6 trials of the YAML's 20 steps, evaluated every 5 (rungs 5 and 15).
Every method searches by eval loss, as on the tiny tasks.

Per method: median and spread (min-max) of the best eval loss seen at any evaluation,
total steps relative to random search, the best found within a quarter of random
search's steps, steps until the best-so-far first reaches random search's median best,
wall time; then each sweeper method minus the loop seed by seed (the mean, a bootstrap
95% interval, better/worse/equal seeds).

    python -m benchmarks.search_quality                       # the default methods, 3 seeds, the small task
    python -m benchmarks.search_quality --task misleading --seeds 0,1 --methods random   # rank correlations
    python -m benchmarks.search_quality --task headroom --seeds 0,1,2 \
        --methods random,optuna,asha_budget10,asha_budget25,asha_budget50,asha_budget100 --plot anytime.html
    python -m benchmarks.search_quality --task real --seeds 0,1 --methods random,optuna,asha --loop-share 0 --results runs/sq-real
    python -m benchmarks.search_quality --task small --seeds 0 --methods asha,prior --results runs/sq-small   # the prior candidate
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import random
import statistics
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import optuna
from ray.tune import Callback

from benchmarks.common import QUICKSTART, REPO, bench_spec, machine, run_bench_sweep, save_json
from trainables.metrics import STEP

SPACE = {
    "training.learning_rate": {"distribution": "log_uniform", "low": 1.0e-5, "high": 1.0e-1},
    "lora.r": {"distribution": "categorical", "values": [2, 4, 8, 16, 32]},
    "lora.alpha_per_rank": {"distribution": "categorical", "values": [0.5, 1, 2, 4]},
    "training.warmup_ratio": {"distribution": "uniform", "low": 0.0, "high": 0.2},
}
# `--space`: the space; the same with the learning rate over the two decades where
# the small task's LoRA learns in 243 steps without diverging (fewer hopeless trials); the
# same with the learning rate over its upper three decades (the misleading task's).
SPACES = {
    "issue": SPACE,
    "lora": {**SPACE, "training.learning_rate": {"distribution": "log_uniform", "low": 1.0e-4, "high": 1.0e-2}},
    "upper_lr": {**SPACE, "training.learning_rate": {"distribution": "log_uniform", "low": 1.0e-4, "high": 1.0e-1}},
    # The real task's: search_spaces/smollm2-cpu.yaml's (a unit test holds them equal).
    "smollm2": {
        "training.learning_rate": {"distribution": "log_uniform", "low": 1.0e-4, "high": 3.0e-3},
        "lora.r": {"distribution": "categorical", "values": [4, 16]},
    },
}
METRIC = "eval_loss"
# What the real task's trials also report at max_steps: the share of exactly right answers.
EXACT_MATCH = "gen_exact_match"
# The real task's sweep: a pretrained chat model, its data, batch, eval sample and generation.
REAL_YAML = REPO / "search_spaces" / "smollm2-cpu.yaml"
# The compute target: a quarter of random search's total steps. The table gives
# every method's best at that compute too, the loop's and random search's included (their
# first quarter), which compares the methods at equal steps.
TARGET_SHARE = 0.25

# name -> the spec sections it sets over the defaults (None: a method run in this process,
# without the sweeper). `asha_ladder` and `asha_keep2_spacing4` are the ladders
# docs/concepts/asha.md compares with the default.
METHODS: dict[str, dict | None] = {
    "random": None,
    "optuna": None,
    "asha": {},  # the sweeper's defaults
    "asha_ladder": {"early_stopping": {"reduction_factor": 3, "rungs": "all", "startup_trials": 4}},  # 9, 27, 81
    "asha_keep2_spacing4": {"early_stopping": {"reduction_factor": 2, "rung_spacing": 4, "rungs": "all"}},  # 9, 36, 144
    "asha_stopping": {"early_stopping": {"scheduler": "asha_stopping"}},
    "median": {"early_stopping": {"scheduler": "median"}},
    # The default's sweep with its sampler wrapped in PriorSampler (run_sweeper): the prior candidate.
    "prior": {},
}
# The methods run_sweeper runs with the prior candidate's sampler.
PRIOR_METHODS = {"prior"}
# The anytime comparison: each method's best-so-far read at these shares of random search's
# steps, and the default run with no trial count until a budget.max_steps cap of each share
# (`asha_budget10` ...): trials keep coming until the cap.
ANYTIME_SHARES = (0.1, 0.25, 0.5, 1.0)
# A run "reached" a share when it trained this much of it: a budget cap is met to within
# a trial's first rung (a few steps short), not to the step.
REACHED = 0.95
BUDGET_METHODS = {f"asha_budget{round(share * 100)}": share for share in ANYTIME_SHARES}
METHODS.update({name: {"budget_share": share} for name, share in BUDGET_METHODS.items()})
# The steps the rank correlations are read at: ASHA's ladder with eta 3 from the default
# first rung (9, 27, 81 at 243 steps), and the share of the trials "the best" means there.
RANK_ETA = 3
DEFAULT_METHODS = ["random", "optuna", "asha", "asha_ladder", "asha_stopping", "median"]


# --- the task ---------------------------------------------------------------------------

# The Optuna loop's MedianPruner waits this many steps (`n_warmup_steps`), as the loops users
# write do: the third evaluation at 243 steps (the sweeper's first rung is at 9).
LOOP_WARMUP = 27

# The base's pretraining steps (batch 32, learning rate 3e-3; `--base-steps`), fine-tuning
# examples (`--train-examples`) and the base's hidden size and layers (`--base-shape`): the
# small task's. 64x2 is the built-in tiny model's shape (0.13M parameters); 256x4 is 3.3M.
BASE_STEPS = 80
TRAIN_EXAMPLES = 2000
BASE_SHAPE = "64x2"
# The tiny tasks' size: trials, max_steps, evaluations and the loop's pruner warmup.
TINY_SIZE = {"trials": 27, "max_steps": 243, "eval_every": 9, "loop_warmup": LOOP_WARMUP}

# The benchmark's tasks (`--task`), each a base, fine-tuning data and a space; an option
# given on the command line overrides its task's value. benchmarks/README.md gives each
# task's rank correlation by rung.
# - small: the base's own four families, fine-tuned on new examples: what is left to learn
#   is small, and a learning rate that is too high makes the loss worse than the base's;
# - headroom: three families the base never saw (new_family_example), on a base pretrained
#   longer: good and bad configs end far apart;
# - misleading: the headroom task with the learning rate over [1e-4, 1e-1] (SPACES["upper_lr"]):
#   no trial whose learning rate is too low to move (those rank last at every step), and
#   many high enough to lead at the first rung and end behind, while from step 81 a
#   trial's rank holds to the end.
# - real: SmolLM2-135M-Instruct on the shipped chat tasks (REAL_YAML), no base built; a size
#   that runs on a 2-core CPU (a step about 1.7 s, an evaluation of 32 rows about 5 s), the
#   loop's pruner waiting to the second evaluation.
TASKS = {
    "small": {**TINY_SIZE, "base_shape": BASE_SHAPE, "base_steps": BASE_STEPS, "train_examples": TRAIN_EXAMPLES, "sft": "same",
              "space": "issue"},
    "headroom": {**TINY_SIZE, "base_shape": BASE_SHAPE, "base_steps": 1000, "train_examples": TRAIN_EXAMPLES, "sft": "new",
                 "space": "issue"},
    "misleading": {**TINY_SIZE, "base_shape": BASE_SHAPE, "base_steps": 1000, "train_examples": TRAIN_EXAMPLES, "sft": "new",
                   "space": "upper_lr"},
    "real": {"trials": 6, "max_steps": 20, "eval_every": 5, "loop_warmup": 10, "space": "smollm2"},
}


LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _word(rng: random.Random) -> str:
    """A random word of 5-9 letters, the subject of every task family."""
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(5, 9)))


def _example(rng: random.Random) -> dict:
    word = _word(rng)
    family = rng.randrange(4)
    if family == 0:
        prompt, answer = f"Sort: {word}", "".join(sorted(word))
    elif family == 1:
        prompt, answer = f"Mirror: {word}", word[::-1]
    elif family == 2:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        prompt, answer = f"Sum: {a}+{b}", str(a + b)
    else:
        letter = rng.choice(word)
        prompt, answer = f"Count {letter} in: {word}", str(word.count(letter))
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def new_family_example(rng: random.Random) -> dict:
    """A fine-tuning example of three families the base never saw (`--sft new`): each
    letter upper-cased, each letter doubled, each letter shifted one on in the alphabet.
    Letter-by-letter maps that LoRA learns in a few hundred steps at a good learning rate
    and not at all at a poor one: what is left to learn is large, so the space's good and
    bad configs end far apart (the headroom task)."""
    word = _word(rng)
    family = rng.randrange(3)
    if family == 0:
        prompt, answer = f"Upper: {word}", word.upper()
    elif family == 1:
        prompt, answer = f"Double: {word}", "".join(c + c for c in word)
    else:
        prompt, answer = f"Next: {word}", "".join(LETTERS[(LETTERS.index(c) + 1) % 26] for c in word)
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def mixed_answer_example(rng: random.Random) -> dict:
    """A fine-tuning example of four families the base never saw (`--sft mixed`, the task of
    benchmarks/selection.py): two of the headroom task's, whose answers are a whole word
    (each letter upper-cased, shifted one on), and two whose answer is one token (the
    word's last letter, its length). Eval loss counts every answer token, most of them in
    the long answers; exact match counts whole answers, which the tiny base reaches in a
    few hundred steps for the short ones only: what each metric rewards differs."""
    word = _word(rng)
    family = rng.randrange(4)
    if family == 0:
        prompt, answer = f"Upper: {word}", word.upper()
    elif family == 1:
        prompt, answer = f"Next: {word}", "".join(LETTERS[(LETTERS.index(c) + 1) % 26] for c in word)
    elif family == 2:
        prompt, answer = f"Last: {word}", word[-1]
    else:
        prompt, answer = f"Length: {word}", str(len(word))
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


# `--sft`: what the task fine-tunes on. "same": new examples of the base's own four families
# (the small and headroom tasks); "new": three families the base never saw (new_family_example);
# "mixed": long and one-token answers (mixed_answer_example).
SFT_EXAMPLES = {"same": _example, "new": new_family_example, "mixed": mixed_answer_example}


@functools.cache
def _chat_template():
    from trainables.tiny import build_tokenizer

    return build_tokenizer()


def _chat_text(rng: random.Random) -> str:
    """One pretraining text of the base: an example rendered with the chat template."""
    return _chat_template().apply_chat_template(_example(rng)["messages"], tokenize=False)


def write_task(
    folder: Path, base_steps: int = BASE_STEPS, train: int = TRAIN_EXAMPLES, eval_: int = 160, base_shape: str = BASE_SHAPE,
    sft: str = "same",
) -> tuple[Path, Path, Path]:
    """The benchmark's base model and chat data, the same on every run (seeded):
    (train file, eval file, model folder). The base's pretraining texts come from their
    own random stream, not from the train or eval examples, and always from the four
    families of `_example`; the train and eval examples from `SFT_EXAMPLES[sft]`."""
    from trainables import tiny

    folder = folder.resolve()  # the spec resolves relative paths against the quickstart's folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1234)
    paths = []
    for name, count in (("train", train), ("eval", eval_)):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(SFT_EXAMPLES[sft](rng)) + "\n" for _ in range(count)))
        paths.append(path)
    hidden_size, layers = parse_shape(base_shape)
    model = folder / (f"base-{base_steps}" if base_shape == BASE_SHAPE else f"base-{base_shape}-{base_steps}")
    if not (model / "config.json").is_file():
        tiny.build(model, text=_chat_text, steps=base_steps, hidden_size=hidden_size, layers=layers)
    return paths[0], paths[1], model


def parse_shape(shape: str) -> tuple[int, int]:
    """'256x4' -> (hidden size 256, 4 layers); ValueError names what is valid."""
    hidden, _, layers = shape.partition("x")
    if not (hidden.isdigit() and layers.isdigit() and int(hidden) >= 16 and int(hidden) % 16 == 0 and int(layers) >= 1):
        raise ValueError(f"want HIDDENxLAYERS, the hidden size a multiple of 16 (e.g. 256x4), got {shape!r}")
    return int(hidden), int(layers)


@dataclass
class Settings:
    trials: int
    max_steps: int
    eval_every: int
    task: tuple[Path, Path, Path] | None  # train, eval, base model; None: the real task (REAL_YAML's)
    space: dict = field(default_factory=lambda: SPACE)
    loop_warmup: int = 0  # the Optuna loop's MedianPruner(n_warmup_steps=)
    loop_share: float = 0.0  # the loop trains at least this share of random search's steps

    @property
    def random_steps(self) -> int:
        """Random search's steps: every trial to max_steps."""
        return self.trials * self.max_steps

    @property
    def yaml(self) -> Path:
        """The shipped sweep whose sections the benchmark's specs start from."""
        return REAL_YAML if self.task is None else QUICKSTART

    def sections(self, seed: int, method: str = "tpe") -> dict:
        search = {"num_trials": self.trials, "method": method, "seed": seed, "parameters": self.space}
        steps = {"max_steps": self.max_steps, "eval_every": self.eval_every}
        if self.task is None:  # REAL_YAML's model, data, batch, LoRA and generation; searched by eval loss
            return dict(
                training=steps, search={**search, "metric": METRIC, "goal": "minimize"},
                early_stopping={"scheduler": "asha"},  # the defaults, where the YAML runs every trial to the end
            )
        return dict(
            model={"name_or_path": str(self.task[2])},
            data={"train": str(self.task[0]), "eval": str(self.task[1]), "max_length": 64},
            training={**steps, "per_device_batch_size": 8},
            lora={"r": 8, "alpha_per_rank": 2},
            search=search,
            early_stopping={},  # the defaults (grace_period: max_steps / 27 on an evaluation, 9 here)
        )


# --- what a method's run leaves: every evaluation, in the order it happened ------------

@dataclass
class Outcome:
    method: str
    seed: int
    # (arrival order, trial, step, value)
    evaluations: list[tuple[float, str, int, float]] = field(default_factory=list)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # a sweep's budget line: how a cap ended it
    # (trial, step, exact match): the real task's answers, scored where a trial reached max_steps
    exact_matches: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return len({trial for _, trial, _, _ in self.evaluations})

    @property
    def best(self) -> float:
        return min(v for _, _, _, v in self.evaluations)

    @property
    def steps(self) -> int:
        reached: dict[str, int] = defaultdict(int)
        for _, trial, step, _ in self.evaluations:
            reached[trial] = max(reached[trial], step)
        return sum(reached.values())

    @property
    def best_exact_match(self) -> float | None:
        """The highest exact match of any trial that reached max_steps; None without one."""
        return max((value for _, _, value in self.exact_matches), default=None)

    def _in_order(self):
        """(total steps trained so far, all trials as far as each had reported; the trial,
        its step and the value) for each evaluation, in the order they arrived."""
        reached: dict[str, int] = defaultdict(int)
        for _, trial, step, value in sorted(self.evaluations):
            reached[trial] = max(reached[trial], step)
            yield sum(reached.values()), trial, step, value

    def best_within(self, budget: float) -> float:
        """The best eval loss seen before the total steps trained passed `budget`: what the
        method had found at that compute."""
        best = math.inf
        for steps, _, _, value in self._in_order():
            if steps > budget:
                break
            best = min(best, value)
        return best

    def best_exact_match_within(self, budget: float) -> float | None:
        """The highest exact match scored before the total steps trained passed `budget`
        (answers are scored with the evaluation at the same step); None before the first."""
        scored = {(trial, step): value for trial, step, value in self.exact_matches}
        best = None
        for steps, trial, step, _ in self._in_order():
            if steps > budget:
                break
            if (trial, step) in scored:
                best = max(scored[trial, step], best if best is not None else -math.inf)
        return best

    def steps_to_reach(self, target: float) -> int | None:
        """Total steps trained when the best-so-far first reached `target`; None if it never did."""
        return next((steps for steps, _, _, value in self._in_order() if value <= target), None)


def _plain_trial(args) -> tuple[list[tuple[int, float]], float | None]:
    """One trial of the random search, to max_steps, in a worker process."""
    spec_sections, yaml, values, seed = args
    return _train_in_process(spec_sections, yaml, values, seed, prune=None)


# A process's prepared inputs by (yaml, sections): its trials of one search share them, as
# a sweep's trials share the sweep's (searched values change no input).
_PREPARED: dict = {}


def _prepared(spec_sections: dict, yaml: Path, name: str):
    """(spec, inputs) of the sweep `spec_sections` over `yaml`, its inputs prepared as a
    sweep prepares them (tokenized data, the eval sample and the generation sample), once
    a process."""
    from sweeper.plan._inputs import prepare_inputs
    from trainables.models import DEFAULT_CACHE_ROOT

    key = (str(yaml), json.dumps(spec_sections, sort_keys=True))
    if key not in _PREPARED:
        spec = bench_spec(name, Path(tempfile.mkdtemp(prefix="sweeper-bench-sq-")), yaml, **spec_sections)
        _PREPARED[key] = spec, prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    return _PREPARED[key]


def _train_in_process(spec_sections: dict, yaml: Path, values: dict, seed: int, prune) -> tuple[list[tuple[int, float]], float | None]:
    """One trial in this process on the search's prepared inputs (`_prepared`): its (step,
    eval loss) at each evaluation and its exact match at max_steps (None where it was
    pruned or generates nothing)."""
    import torch

    from trainables.sft import train

    torch.set_num_threads(1)
    spec, inputs = _prepared(spec_sections, yaml, f"bench-sq-plain-{seed}")
    history: list[tuple[int, float]] = []
    exact_match = None

    def report(metrics, checkpoint):
        nonlocal exact_match
        history.append((metrics[STEP], metrics[METRIC]))
        exact_match = metrics.get(EXACT_MATCH, exact_match)
        if prune is not None:
            prune(metrics[STEP], metrics[METRIC])

    try:
        train(spec.trial_config().with_values(values), inputs.data, inputs.model_source, report=report, started_at=time.time())
    except Exception as error:  # noqa: BLE001 - a pruned trial ends by an exception from report
        if type(error).__name__ != "TrialPruned":
            raise
    return history, exact_match


def random_configs(settings: Settings, seed: int) -> list[dict]:
    """Random search's configs for `seed`, in order: the same on every call."""
    import optuna

    from sweeper.search import parameters_to_optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per study otherwise
    space = parameters_to_optuna(settings.space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    configs = []
    for _ in range(settings.trials):
        trial = study.ask(space)
        configs.append(dict(trial.params))
        study.tell(trial, 0.0)
    return configs


def run_random(settings: Settings, seed: int) -> tuple[Outcome, list[list[tuple[int, float]]]]:
    """Random search with every trial to max_steps, two trials at a time (as the sweeps
    run them), each in its own process."""
    configs = random_configs(settings, seed)
    started = time.time()
    outcome = Outcome("random", seed)
    import multiprocessing

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        trials = list(pool.map(_plain_trial, [(settings.sections(seed), settings.yaml, c, seed) for c in configs]))
    outcome.wall_s = time.time() - started
    # Arrival order as two slots would see it: trial i's evaluations in the i-th pair.
    histories = [history for history, _ in trials]
    for index, (history, exact_match) in enumerate(trials):
        for step, value in history:
            outcome.evaluations.append((index // 2 * settings.max_steps + step, str(index), step, value))
        if exact_match is not None:
            outcome.exact_matches.append((str(index), history[-1][0], exact_match))
    return outcome, histories


def run_optuna_loop(settings: Settings, seed: int) -> Outcome:
    """What users write by hand: TPE + MedianPruner, one trial at a time. The pruner
    waits `settings.loop_warmup` steps (`n_warmup_steps`), as users' loops do; with
    `settings.loop_share` the loop goes on past `settings.trials` trials until it has
    trained that share of random search's steps, so the anytime comparison can read it
    there."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_warmup_steps=settings.loop_warmup)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner)
    outcome = Outcome("optuna", seed)
    started = time.time()
    clock = 0

    def objective(trial):
        values = {path: suggest(trial, path, dist) for path, dist in settings.space.items()}

        def prune(step, value):
            nonlocal clock
            clock += 1
            outcome.evaluations.append((clock, str(trial.number), step, value))
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        history, exact_match = _train_in_process(settings.sections(seed), settings.yaml, values, seed, prune)
        if len(history) and history[-1][0] < settings.max_steps:
            raise optuna.TrialPruned()
        if exact_match is not None:
            outcome.exact_matches.append((str(trial.number), history[-1][0], exact_match))
        return history[-1][1]

    def enough(study, trial):
        if len(study.trials) >= settings.trials and outcome.steps >= settings.loop_share * settings.random_steps:
            study.stop()

    study.optimize(objective, callbacks=[enough])
    outcome.wall_s = time.time() - started
    return outcome


def suggest(trial, path: str, dist: dict):
    """One value of a space's entry, as a hand-written objective asks for it."""
    if dist["distribution"] == "categorical":
        return trial.suggest_categorical(path, dist["values"])
    return trial.suggest_float(path, dist["low"], dist["high"], log=dist["distribution"] == "log_uniform")


class EvaluationClock(Callback):
    """Every result as the driver receives it: (arrival time, trial, step, value), and the
    exact match of the results that carry one."""

    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(METRIC) is not None:
            self.outcome.evaluations.append((time.time(), trial.trial_id, result[STEP], result[METRIC]))
        if result.get(EXACT_MATCH) is not None:
            self.outcome.exact_matches.append((trial.trial_id, result[STEP], result[EXACT_MATCH]))


def sweep_sections(settings: Settings, seed: int, name: str) -> dict:
    """The spec sections of sweeper method `name`'s sweep: its sections (METHODS) over the
    defaults; with a `budget_share`, no trial count and a `budget.max_steps` cap of that
    share of random search's steps."""
    overrides = METHODS[name]
    sections = settings.sections(seed)
    for key in ("early_stopping", "search", "training"):
        sections[key] = {**sections[key], **overrides.get(key, {})}
    if "budget_share" in overrides:
        sections["search"]["num_trials"] = None
        sections["budget"] = {"max_steps": round(overrides["budget_share"] * settings.random_steps)}
    return sections


def run_sweeper(settings: Settings, seed: int, name: str) -> Outcome:
    """One sweep through `run_sweep`, as `sweep start` runs it; a PRIOR_METHODS sweep with
    its sampler wrapped in PriorSampler."""
    spec = bench_spec(f"bench-sq-{name}-{seed}", yaml=settings.yaml, **sweep_sections(settings, seed, name))
    outcome = Outcome(name, seed)
    with prior_sampler(settings, seed) if name in PRIOR_METHODS else contextlib.nullcontext():
        run = run_bench_sweep(spec, extra_callbacks=[EvaluationClock(outcome)])
    outcome.wall_s = run.wall_seconds
    outcome.notes = [note for note in run.notes if note.startswith("Budget")]
    return outcome


# --- the prior candidate (issue 78) ---------------------------------------------------------
# PriorBand-style (Mallik et al., 2023): each new trial's config is drawn from a prior built
# from `sweep init`'s sourced ranges with a probability that falls as trials accrue, else
# from the default's sampler (TPE under ASHA). Benchmark code only: a candidate.

# The centres of the categorical parameters, which sweep init does not give as a centre:
# lora.r 32 (trl's example SFT command, as sweep init's comment on the rank cites) and
# lora.alpha_per_rank 2 (alpha = 2 x r, the convention sweep init's file offers). A
# categorical's value nearest its centre (on a log scale) weighs CENTRE_WEIGHT against 1 for
# each other value: half the mass over five values, 0.8 over two.
PRIOR_CENTRES = {"lora.r": 32, "lora.alpha_per_rank": 2}
CENTRE_WEIGHT = 4


def sweep_init_prior(tiny: bool) -> dict[str, dict]:
    """The prior over the parameters sweep init sources, from its SFT space
    (sweeper/scaffold/_writer.py; `tiny`: its learning rate for builtin:tiny-llama, whose
    shape the tiny tasks' base has): a range becomes a normal, on a log scale for a
    log-uniform one, centred in it with the range as two standard deviations either side
    (the learning rate: 2e-4, 4x either side, for a real model); a categorical its centre
    (PRIOR_CENTRES)."""
    from sweeper.scaffold._writer import _space  # sweep init's space and sources, one copy

    prior = {}
    for key, dist, _why in _space("sft", tiny=tiny)[0]:
        if dist["distribution"] in ("log_uniform", "uniform"):
            log = dist["distribution"] == "log_uniform"
            low, high = (math.log(dist["low"]), math.log(dist["high"])) if log else (dist["low"], dist["high"])
            prior[key] = {"log": log, "mean": (low + high) / 2, "sd": (high - low) / 4}
    return {**prior, **{key: {"centre": centre} for key, centre in PRIOR_CENTRES.items()}}


def prior_probability(number: int, weight: int) -> float:
    """The chance that trial `number` (from 0) is drawn from the prior: 1 for the first (the
    prior's mode, the config sweep init recommends), then weight / (weight + number), which
    halves by the time `weight` trials exist (TPE's random startup trials: the prior stands
    in for uniform draws while TPE knows little) and keeps falling as pi-BO's prior weight
    does, so a wrong prior costs a shrinking share of the trials."""
    return 1.0 if number == 0 else weight / (weight + number)


def _nearest(values: list, centre: float):
    return min(values, key=lambda v: abs(math.log(v / centre)))


def prior_mode(prior: dict, space: dict) -> dict:
    """The prior's most likely config on `space`: each centre, clipped to the space's range
    (a parameter the prior does not cover: the middle of its range or its first value)."""
    config = {}
    for path, dist in space.items():
        belief = prior.get(path)
        if dist["distribution"] == "categorical":
            config[path] = _nearest(dist["values"], belief["centre"]) if belief else dist["values"][0]
        elif belief:
            value = math.exp(belief["mean"]) if belief["log"] else belief["mean"]
            config[path] = min(max(value, dist["low"]), dist["high"])
        else:
            config[path] = (dist["low"] + dist["high"]) / 2
    return config


def prior_config(prior: dict, space: dict, rng: random.Random) -> dict:
    """A config on `space` drawn from `prior`: each range's normal truncated to the space
    (redrawn until inside; clipped after 100 tries), each categorical's centre with weight
    CENTRE_WEIGHT against 1 for each other value; a parameter the prior does not cover,
    uniformly."""
    config = {}
    for path, dist in space.items():
        belief = prior.get(path)
        if dist["distribution"] == "categorical":
            values = dist["values"]
            weights = [CENTRE_WEIGHT if belief and v == _nearest(values, belief["centre"]) else 1 for v in values]
            config[path] = rng.choices(values, weights)[0]
            continue
        low, high = dist["low"], dist["high"]
        if not belief:
            config[path] = rng.uniform(low, high)
            continue
        for _ in range(100):
            drawn = rng.gauss(belief["mean"], belief["sd"])
            value = math.exp(drawn) if belief["log"] else drawn
            if low <= value <= high:
                break
        config[path] = min(max(value, low), high)
    return config


def prior_draw(prior: dict, space: dict, number: int, seed: int, weight: int) -> dict | None:
    """Trial `number`'s config from the prior, or None where it is the default sampler's:
    decided and drawn from a stream of its own (seed, number), so the same on every run
    whatever order the trials are asked in."""
    rng = random.Random(f"prior-{seed}-{number}")
    if number > 0 and rng.random() >= prior_probability(number, weight):
        return None
    return prior_mode(prior, space) if number == 0 else prior_config(prior, space, rng)


class PriorSampler(optuna.samplers.BaseSampler):
    """`sampler` (the default's TPE) with each trial's config drawn from `prior` instead
    where `prior_draw` says so; through Optuna's public sampler interface only."""

    def __init__(self, sampler, prior: dict, space: dict, seed: int, weight: int):
        self.sampler, self.prior, self.space, self.seed, self.weight = sampler, prior, space, seed, weight
        self._drawn: tuple[int, dict | None] | None = None  # (trial number, its prior config or None)

    def _from_prior(self, trial) -> dict | None:
        if self._drawn is None or self._drawn[0] != trial.number:
            self._drawn = (trial.number, prior_draw(self.prior, self.space, trial.number, self.seed, self.weight))
        return self._drawn[1]

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()

    def infer_relative_search_space(self, study, trial):
        return {} if self._from_prior(trial) is not None else self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return {} if self._from_prior(trial) is not None else self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        config = self._from_prior(trial)
        if config is not None and param_name in config:
            return config[param_name]
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.sampler.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampler.after_trial(study, trial, state, values)


@contextlib.contextmanager
def prior_sampler(settings: Settings, seed: int):
    """While open, the sweeps this process (the driver) starts wrap their sampler in
    PriorSampler: the prior from sweep init's ranges for the task's model (the tiny
    tasks' base has builtin:tiny-llama's shape), its weight TPE's startup trials for the
    sweep's trial count. Replaces the one name the searcher's module builds its sampler
    with: were the candidate kept, it would be an option of make_sampler."""
    import sweeper.search._searcher as searcher_module
    from sweeper.search import startup_trials

    build = searcher_module.make_sampler
    prior = sweep_init_prior(tiny=settings.task is not None)

    def make_sampler(spec):
        return PriorSampler(build(spec), prior, settings.space, seed, startup_trials(spec.search.num_trials))

    with mock.patch.object(searcher_module, "make_sampler", make_sampler):
        yield


# --- figures ------------------------------------------------------------------------------

def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's over the ranks (ties take their mean rank);
    NaN where either side has fewer than two distinct values."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        found = [0.0] * len(values)
        start = 0
        while start < len(order):
            end = start
            while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
                end += 1
            for i in order[start : end + 1]:
                found[i] = (start + end) / 2
            start = end + 1
        return found

    a, b = ranks(xs), ranks(ys)
    mean_a, mean_b = statistics.fmean(a) if a else 0.0, statistics.fmean(b) if b else 0.0
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True))
    spread = math.sqrt(sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b))
    return cov / spread if spread else math.nan


def rank_correlations(
    histories: list[list[tuple[int, float]]], steps: list[int], best_share: float = 1.0, final: bool = False,
) -> dict[int, float]:
    """Spearman between the eval loss at each step in `steps` and the trial's best eval
    loss over its whole run (with `final`, its last one), across the best `best_share` of
    the trials (by their best): 1.0 for all; 1/3 for those among which ASHA's rungs pick
    what goes on."""
    ranked = sorted(histories, key=lambda h: min(v for _, v in h))
    chosen = ranked[: max(3, round(len(ranked) * best_share))]
    end = (lambda h: h[-1][1]) if final else (lambda h: min(v for _, v in h))
    found = {}
    for step in steps:
        pairs = [(dict(h)[step], end(h)) for h in chosen if step in dict(h)]
        found[step] = spearman([a for a, _ in pairs], [b for _, b in pairs])
    return found


def exact_match_correlations(
    histories: list[list[tuple[int, float]]], exact_matches: list[float | None], steps: list[int],
) -> dict[int, float]:
    """Spearman between a trial's eval loss at each step in `steps` and its exact match at
    the end (`exact_matches[i]` is trial i's; None: it has none), the sign turned so that 1
    means the lower a trial's loss at the step, the more right answers it gives at the end:
    how far a rung that ranks by eval loss ranks by what the user wants. Over the trials
    that have both."""
    found = {}
    for step in steps:
        pairs = [(dict(h)[step], -answers) for h, answers in zip(histories, exact_matches, strict=True)
                 if answers is not None and step in dict(h)]
        found[step] = spearman([a for a, _ in pairs], [b for _, b in pairs])
    return found


def paired_difference(bests: list[float], against: list[float], resamples: int = 10000, seed: int = 0) -> dict:
    """A method's best eval loss minus another's, seed by seed (the same seed draws the
    same task and first configs for both): the mean difference, a bootstrap 95% interval
    of it, and on how many seeds the method was better, worse or equal (to 1e-4). An
    interval that holds 0 says the seeds cannot tell the two apart."""
    differences = [a - b for a, b in zip(bests, against, strict=True)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(differences, k=len(differences))) for _ in range(resamples))
    return {
        "mean": statistics.fmean(differences),
        "low": means[int(0.025 * (resamples - 1))],
        "high": means[int(0.975 * (resamples - 1))],
        "better": sum(d < -1e-4 for d in differences),
        "worse": sum(d > 1e-4 for d in differences),
        "equal": sum(abs(d) <= 1e-4 for d in differences),
    }


def best_trial_ranks(histories: list[list[tuple[int, float]]], steps: list[int]) -> dict[int, int]:
    """Where the trial that ends best stands at each step (1 = lowest eval loss there): a
    rung that keeps the best 1/eta keeps it only while its rank is at most n / eta."""
    best = min(histories, key=lambda h: min(v for _, v in h))
    ranks = {}
    for step in steps:
        at = sorted(dict(h)[step] for h in histories if step in dict(h))
        ranks[step] = at.index(dict(best)[step]) + 1
    return ranks


def anytime(runs: list[Outcome], random_steps: float, shares=ANYTIME_SHARES) -> dict[float, list[float]]:
    """Each seed's best-so-far eval loss at each share of random search's steps: what the
    method had found once its trials had trained that much (a run that ended sooner:
    its best when it ended)."""
    return {share: [o.best_within(share * random_steps) for o in runs] for share in shares}


def headroom(random_by_seed: dict[int, list]) -> dict[int, dict[str, float]]:
    """Per seed, random search's best trial against its median trial (each trial's best
    eval loss): a task leaves a search room to matter only where these differ."""
    found = {}
    for seed, histories in sorted(random_by_seed.items()):
        bests = [min(v for _, v in h) for h in histories if h]
        if bests:
            found[seed] = {"best": min(bests), "median": statistics.median(bests), "gap": statistics.median(bests) - min(bests)}
    return found


def plot_anytime(outcomes: dict[str, list[Outcome]], random_steps: float, path: Path, title: str) -> Path | None:
    """The best-so-far eval loss (median over seeds) against training steps as a share of
    random search's, one line per method, as far as the method's median run trained:
    `path` (HTML, plotly embedded) and a PNG beside it where kaleido finds a browser
    (returned; None without one)."""
    import plotly.graph_objects as go
    import plotly.io as pio

    grid = [i / 100 for i in range(1, 101)]
    figure = go.Figure()
    from_first_share = []  # the curves' values from the first share on: the y range (the first trials' losses would flatten the rest)
    for method, runs in outcomes.items():
        reach = statistics.median(o.steps for o in runs) / random_steps
        xs = [x for x in grid if x <= reach + 1e-9]
        ys = [statistics.median(o.best_within(x * random_steps) for o in runs) for x in xs]
        from_first_share += [y for x, y in zip(xs, ys) if x >= ANYTIME_SHARES[0] and math.isfinite(y)]
        figure.add_scatter(x=xs, y=[y if math.isfinite(y) else None for y in ys], mode="lines", name=method, line_shape="hv")
    if from_first_share:
        low, high = min(from_first_share), max(from_first_share)
        margin = max(0.01, 0.1 * (high - low))
        figure.update_yaxes(range=[low - margin, high + margin])
    for share in ANYTIME_SHARES:
        figure.add_vline(x=share, line_dash="dot", line_color="grey")
    figure.update_layout(
        title=title, template="plotly_white", xaxis_title="training steps / random search's",
        yaxis_title="best eval loss so far, median over seeds",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(path, include_plotlyjs=True)
    png = path.with_suffix(".png")
    try:
        pio.write_image(figure, png, width=1000, height=460)
    except Exception:  # noqa: BLE001 - kaleido without Chrome or Chromium: the HTML is the plot
        return None
    return png


def save_outcome(folder: Path, outcome: Outcome, histories=None) -> None:
    data = {"method": outcome.method, "seed": outcome.seed, "wall_s": outcome.wall_s,
            "evaluations": outcome.evaluations, "histories": histories, "notes": outcome.notes,
            "exact_matches": outcome.exact_matches}
    (folder / f"{outcome.method}-{outcome.seed}.json").write_text(json.dumps(data))


def load_outcome(folder: Path, method: str, seed: int) -> tuple[Outcome, list] | None:
    path = folder / f"{method}-{seed}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    outcome = Outcome(method, seed, [tuple(e) for e in data["evaluations"]], data["wall_s"], data.get("notes", []),
                      [tuple(e) for e in data.get("exact_matches", [])])
    return outcome, [[tuple(r) for r in h] for h in data["histories"] or []]


def untrained(settings: Settings, results: Path) -> dict[str, float]:
    """The real task's base model before any fine-tuning, on the rows every trial is judged
    by: its eval loss on the eval sample and its exact match on the generation sample, as a
    trial's evaluation and generation take them (one thread); kept in `results`."""
    kept = results / "untrained.json"
    if kept.exists():
        return json.loads(kept.read_text())
    import torch

    from trainables.common import Workers
    from trainables.generation import task_metrics
    from trainables.models import load_base_model
    from trainables.sft import evaluate

    print(f"[{time.strftime('%H:%M:%S')}] the untrained model", flush=True)
    torch.set_num_threads(1)
    spec, inputs = _prepared(settings.sections(0), settings.yaml, "bench-sq-untrained")
    model = load_base_model(inputs.model_source)
    workers = Workers(0, 1, torch.device("cpu"))
    training = spec.trial_config().training
    found = {
        "eval_loss": evaluate(model, inputs.data["eval"], training, workers, batch_size=2 * training.per_device_batch_size),
        "exact_match": task_metrics(model, inputs.data["generation"], workers)[EXACT_MATCH],
    }
    kept.write_text(json.dumps(found))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, help="trials per search (the task's unless given)")
    parser.add_argument("--max-steps", type=int, help="steps of a trial that is not stopped (the task's unless given)")
    parser.add_argument(
        "--eval-every", type=int,
        help="steps between evaluations (the task's unless given); the grace period (ASHA's first rung) is the "
        "default: max_steps / 27 on an evaluation",
    )
    parser.add_argument(
        "--task", choices=TASKS, default="small",
        help="the task: its size, its base's shape and pretraining, its fine-tuning data and space (TASKS); "
        "the options given here override its values; real: a pretrained chat model (search_spaces/smollm2-cpu.yaml's), "
        "no base built",
    )
    parser.add_argument("--base-steps", type=int, help="pretraining steps of the task's base model")
    parser.add_argument(
        "--train-examples", type=int,
        help="fine-tuning examples of the task; 100 makes a task that overfits within max_steps, where the rank "
        "at step 9 says little of the end (rank correlation with the final eval loss below 0)",
    )
    parser.add_argument(
        "--base-shape",
        help="the base's hidden size and layers, HIDDENxLAYERS; 256x4 (3.3M parameters) makes a task whose first "
        "rung misleads (a trial costs about 4x the default shape's)",
    )
    parser.add_argument("--space", choices=SPACES, help="the searched space (see SPACES)")
    parser.add_argument(
        "--sft", choices=SFT_EXAMPLES,
        help="what the task fine-tunes on: new examples of the base's own families, or three families it never saw "
        "(a task with headroom: good and bad configs end far apart)",
    )
    parser.add_argument(
        "--loop-warmup", type=int,
        help="the Optuna loop's MedianPruner(n_warmup_steps=): no trial is pruned before this step, as users' loops "
        "wait (the task's unless given)",
    )
    parser.add_argument(
        "--loop-share", type=float, default=ANYTIME_SHARES[-1],
        help="the Optuna loop runs at least --trials trials and until it has trained this share of random search's "
        "steps (the anytime comparison reads it up to there)",
    )
    parser.add_argument("--plot", type=Path, help="also draw the anytime curves to this HTML file (and a PNG beside it where a browser can)")
    parser.add_argument(
        "--results", type=Path,
        help="folder keeping each method's run per seed: runs found there are not run again, so a long "
        "benchmark can be split over several commands (one seed each) and its table printed from all",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    real = args.task == "real"
    built_base = ("base_steps", "train_examples", "base_shape", "sft")
    if real and any(getattr(args, option) is not None for option in built_base):
        parser.error("--base-steps, --train-examples, --base-shape and --sft build a tiny task's base; --task real builds none")
    for option, value in TASKS[args.task].items():
        if getattr(args, option) is None:
            setattr(args, option, value)

    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    if args.loop_warmup < 0 or not 0 <= args.loop_share <= 1:
        parser.error(f"--loop-warmup: at least 0 steps, and --loop-share: 0 to 1; got {args.loop_warmup} and {args.loop_share}")
    if not real and args.train_examples < 8:  # one batch of the fine-tuning (per_device_batch_size 8)
        parser.error(f"--train-examples: at least 8 (one batch), got {args.train_examples}")
    try:
        if not real:
            parse_shape(args.base_shape)
    except ValueError as error:
        parser.error(f"--base-shape: {error}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; valid: {', '.join(METHODS)}")
    if "random" not in methods:
        methods.insert(0, "random")  # the reference for steps and the target loss
    results = args.results or Path(tempfile.mkdtemp(prefix="sweeper-bench-sq-results-"))
    results.mkdir(parents=True, exist_ok=True)
    task_settings = {"trials": args.trials, "max_steps": args.max_steps, "eval_every": args.eval_every,
                     "base_steps": args.base_steps, "space": args.space,
                     "loop_warmup": args.loop_warmup, "loop_share": args.loop_share}
    if not real and args.train_examples != TRAIN_EXAMPLES:  # so the folders of runs before the option stay readable
        task_settings["train_examples"] = args.train_examples
    if not real and args.base_shape != BASE_SHAPE:
        task_settings["base_shape"] = args.base_shape
    if not real and args.sft != "same":
        task_settings["sft"] = args.sft
    kept = results / "settings.json"
    if kept.exists() and json.loads(kept.read_text()) != task_settings:
        parser.error(f"--results: {results} holds runs of other settings ({kept.read_text().strip()}); use a new folder")
    kept.write_text(json.dumps(task_settings))
    settings = Settings(
        args.trials, args.max_steps, args.eval_every,
        None if real else write_task(results / "task", args.base_steps, args.train_examples, base_shape=args.base_shape, sft=args.sft),
        SPACES[args.space], args.loop_warmup, args.loop_share,
    )
    baseline = untrained(settings, results) if real else None

    outcomes: dict[str, list[Outcome]] = defaultdict(list)
    random_by_seed: dict[int, list] = {}
    for seed in seeds:
        for method in methods:
            saved = load_outcome(results, method, seed)
            if saved is None:
                print(f"[{time.strftime('%H:%M:%S')}] {method} seed {seed}", flush=True)
                found = None
                if method == "random":
                    outcome, found = run_random(settings, seed)
                elif method == "optuna":
                    outcome = run_optuna_loop(settings, seed)
                else:
                    outcome = run_sweeper(settings, seed, method)
                save_outcome(results, outcome, found)
                saved = outcome, found or []
                print(f"    best {outcome.best:.4f}, steps {outcome.steps}, wall {outcome.wall_s:.0f} s", flush=True)
            outcomes[method].append(saved[0])
            if method == "random":
                random_by_seed[seed] = saved[1]
    print_table(args, settings, methods, outcomes, random_by_seed, baseline)


def print_anytime(console, settings: Settings, methods: list[str], outcomes: dict, random_by_seed: dict, figures: dict) -> None:
    """The anytime figures: the task's headroom, each method's best-so-far at each share of
    random search's steps, whether more steps bought a better config (each share against
    the one below it, seed by seed, within a run and between the default's capped runs),
    each budget-capped default against the loop at the same steps, and how each
    budget-capped sweep ended."""
    from rich.table import Table

    room = headroom(random_by_seed)
    figures["headroom"] = room
    console.print(
        "headroom (random search's median trial minus its best trial, each trial's best eval loss), per seed: "
        + ", ".join(f"seed {seed}: {r['median']:.3f} - {r['best']:.3f} = {r['gap']:.3f}" for seed, r in room.items())
    )
    random_steps = settings.random_steps
    table = Table(
        title=f"anytime: best so far at a share of random search's steps ({random_steps}); "
        f"† a run that ended before {REACHED:g} of that share (its best when it ended)",
        title_justify="left",
    )
    for column in ("method", "steps / random's, per seed", *(f"at {share:g}x, median (per seed)" for share in ANYTIME_SHARES)):
        table.add_column(column)
    figures["anytime"] = {}
    for method in methods:
        runs = outcomes[method]
        found = anytime(runs, random_steps)
        figures["anytime"][method] = {str(share): values for share, values in found.items()}
        cells = []
        for share, values in found.items():
            short = "†" if statistics.median(o.steps for o in runs) < REACHED * share * random_steps else ""
            cells.append(f"{statistics.median(values):.3f}{short} ({' '.join(f'{v:.3f}' for v in values)})")
        table.add_row(method, " ".join(f"{o.steps / random_steps:.2f}" for o in runs), *cells)
    console.print(table)
    seeds = len(outcomes["random"])
    if seeds < 2:
        return  # the paired intervals need two seeds at least
    figures["more_steps"], figures["budget_against_the_loop"] = {}, {}
    capped = {share: name for name, share in BUDGET_METHODS.items() if name in methods}
    for low, high in zip(ANYTIME_SHARES[1:], ANYTIME_SHARES[2:]):
        for method in methods:
            runs = outcomes[method]
            if any(o.steps < REACHED * high * random_steps for o in runs):
                continue  # did not train to the larger share on every seed
            paired = paired_difference([o.best_within(high * random_steps) for o in runs], [o.best_within(low * random_steps) for o in runs])
            figures["more_steps"][f"{method} {high:g}x - {low:g}x"] = paired
            console.print(
                f"{method}: best at {high:g}x minus best at {low:g}x of random's steps, seed by seed: mean {paired['mean']:+.4f} "
                f"(95% interval {paired['low']:+.4f} to {paired['high']:+.4f}); lower on {paired['better']} of {seeds} seeds"
            )
        if low in capped and high in capped:  # the default under each cap: separate runs, paired by seed
            paired = paired_difference([o.best for o in outcomes[capped[high]]], [o.best for o in outcomes[capped[low]]])
            figures["more_steps"][f"{capped[high]} - {capped[low]}"] = paired
            console.print(
                f"{capped[high]} minus {capped[low]}, seed by seed: mean {paired['mean']:+.4f} "
                f"(95% interval {paired['low']:+.4f} to {paired['high']:+.4f}); lower on {paired['better']} of {seeds} seeds"
            )
    for method, share in BUDGET_METHODS.items():
        if method not in methods or "optuna" not in methods:
            continue
        paired = paired_difference([o.best for o in outcomes[method]], [o.best_within(share * random_steps) for o in outcomes["optuna"]])
        figures["budget_against_the_loop"][method] = paired
        console.print(
            f"{method} (cap {share:g}x) minus the loop at {share:g}x, seed by seed: mean {paired['mean']:+.4f} "
            f"(95% interval {paired['low']:+.4f} to {paired['high']:+.4f}; target: below +0.01); better on "
            f"{paired['better']}, worse on {paired['worse']}, equal on {paired['equal']}"
        )
    for method in (m for m in methods if m in BUDGET_METHODS):
        for o in outcomes[method]:
            console.print(f"{method} seed {o.seed}: {o.trials} trials, {o.steps} steps; {' '.join(o.notes) or 'no budget line'}")


def print_prior_against_the_default(console, settings: Settings, outcomes: dict, figures: dict) -> None:
    """The prior candidate minus the default (asha), seed by seed: its best at each share of
    random search's steps and at the end, beside the default's spread over the seeds (best
    to worst seed): a difference inside that spread is a tie."""
    prior, default = outcomes["prior"], outcomes["asha"]
    figures["prior_against_the_default"] = {}
    for share in (*ANYTIME_SHARES, None):
        budget = math.inf if share is None else share * settings.random_steps
        ours, theirs = [o.best_within(budget) for o in prior], [o.best_within(budget) for o in default]
        paired = paired_difference(ours, theirs)
        spread = max(theirs) - min(theirs)
        figures["prior_against_the_default"]["end" if share is None else str(share)] = {**paired, "default_spread": spread}
        console.print(
            f"prior minus asha {'at the end' if share is None else f'at {share:g}x'}, seed by seed: mean {paired['mean']:+.4f} "
            f"(95% interval {paired['low']:+.4f} to {paired['high']:+.4f}); better on {paired['better']}, worse on "
            f"{paired['worse']}, equal on {paired['equal']}; the default's seed-to-seed spread {spread:.4f}"
        )


def print_exact_match(
    console, settings: Settings, methods: list[str], outcomes: dict, random_by_seed: dict, baseline: dict, figures: dict,
) -> None:
    """The real task's answers: the untrained model's eval loss and exact match, each method's
    trials and best exact match per seed with its best so far at each share of random
    search's steps, and the rank correlation between a trial's eval loss at each rung (and
    at max_steps) and its exact match at the end, over random search's trials."""
    from rich.table import Table

    from sweeper.plan import asha_rungs
    from sweeper.spec import default_grace_period

    random_steps = settings.random_steps
    table = Table(
        title=f"exact match at max_steps ({settings.max_steps}); the untrained model: eval loss {baseline['eval_loss']:.3f}, "
        f"exact match {baseline['exact_match']:.3f}",
        title_justify="left",
    )
    for column in ("method", "trials, per seed", "best exact match, median", "per seed",
                   *(f"at {share:g}x, median (per seed)" for share in ANYTIME_SHARES)):
        table.add_column(column)
    table.add_row("untrained model", "0", f"{baseline['exact_match']:.3f}", "", *("" for _ in ANYTIME_SHARES))
    figures["untrained"] = baseline
    figures["exact_match"] = {}

    def shown(values):
        return " ".join("-" if v is None else f"{v:.3f}" for v in values)

    def median(values):
        found = [v for v in values if v is not None]
        return f"{statistics.median(found):.3f}" if found else "-"

    for method in methods:
        runs = outcomes[method]
        bests = [o.best_exact_match for o in runs]
        at = {share: [o.best_exact_match_within(share * random_steps) for o in runs] for share in ANYTIME_SHARES}
        figures["exact_match"][method] = {"trials": [o.trials for o in runs], "best": bests,
                                          "anytime": {str(share): values for share, values in at.items()}}
        table.add_row(method, " ".join(str(o.trials) for o in runs), median(bests), shown(bests),
                      *(f"{median(values)} ({shown(values)})" for values in at.values()))
    console.print(table)

    rungs = asha_rungs(default_grace_period(settings.max_steps, settings.eval_every), settings.max_steps, RANK_ETA)
    steps = [*rungs, settings.max_steps]
    answers = {seed: random_exact_matches(outcomes["random"], seed, len(h)) for seed, h in random_by_seed.items()}
    pooled = exact_match_correlations(
        [trial for _, trials in sorted(random_by_seed.items()) for trial in trials],
        [value for _, values in sorted(answers.items()) for value in values], steps,
    )
    per_seed = {seed: exact_match_correlations(random_by_seed[seed], answers[seed], steps) for seed in sorted(random_by_seed)}
    figures["exact_match_correlation"], figures["exact_match_correlation_per_seed"] = pooled, per_seed
    console.print(
        "rank correlation of a trial's eval loss at each step with its exact match at max_steps (Spearman, sign turned: "
        "1 = the lower the loss there, the more right answers; random search's trials of all seeds): "
        + ", ".join(f"step {s}: {c:.2f}" for s, c in pooled.items())
        + "; per seed: " + "; ".join(f"seed {seed}: " + ", ".join(f"{c:.2f}" for c in found.values()) for seed, found in per_seed.items())
    )


def random_exact_matches(runs: list[Outcome], seed: int, trials: int) -> list[float | None]:
    """Random search's exact matches for `seed`, in its trials' order (trial i is "i")."""
    run = next(o for o in runs if o.seed == seed)
    scored = {trial: value for trial, _, value in run.exact_matches}
    return [scored.get(str(index)) for index in range(trials)]


def print_table(
    args, settings: Settings, methods: list[str], outcomes: dict, random_by_seed: dict, baseline: dict | None = None,
) -> None:
    """The methods' table, the anytime figures and the rank figures, from random search's trials
    of every seed (`random_by_seed`: seed -> its trials' histories); with the real task's
    `baseline` (the untrained model's figures), its exact-match figures."""
    from rich.console import Console
    from rich.table import Table

    from sweeper.plan import asha_rungs
    from sweeper.spec import default_grace_period

    histories = [h for _, runs in sorted(random_by_seed.items()) for h in runs]
    rungs = asha_rungs(default_grace_period(settings.max_steps, settings.eval_every), settings.max_steps, RANK_ETA)

    random_steps = statistics.median(o.steps for o in outcomes["random"])
    target = statistics.median(o.best for o in outcomes["random"])
    by_rung = rank_correlations(histories, rungs, final=True)
    by_rung_per_seed = {seed: rank_correlations(h, rungs, final=True) for seed, h in sorted(random_by_seed.items()) if len(h) >= 3}
    to_best = rank_correlations(histories, rungs)
    among_best = rank_correlations(histories, rungs, 1 / RANK_ETA)
    rows, figures = [], {"methods": {}, "rank_correlation_by_rung": by_rung, "rank_correlation_by_rung_per_seed": by_rung_per_seed,
                         "rank_correlation_best": to_best, "rank_correlation_best_third": among_best,
                         "target_loss": target, "seeds": args.seeds, "task": args.task}
    for method in methods:
        runs = outcomes[method]
        bests = [o.best for o in runs]
        reach = [o.steps_to_reach(target) for o in runs]
        at_share = [o.best_within(TARGET_SHARE * random_steps) for o in runs]
        figures["methods"][method] = {
            "best": bests,
            "best_at_target_share": at_share,
            "steps": [o.steps for o in runs],
            "steps_to_target": reach,
            "wall_s": [o.wall_s for o in runs],
        }
        rows.append((
            method,
            f"{statistics.median(bests):.3f}",
            f"{min(bests):.3f}-{max(bests):.3f}",
            " ".join(f"{b:.3f}" for b in bests),
            f"{statistics.median(o.steps for o in runs) / random_steps:.2f}",
            f"{statistics.median(at_share):.3f}",
            " ".join("-" if r is None else f"{r / random_steps:.2f}" for r in reach),
            f"{statistics.median(o.wall_s for o in runs):.0f}",
        ))
    table = Table(
        title=f"search quality: {args.trials} trials, max {args.max_steps} steps, eval every {args.eval_every}, "
        f"seeds {args.seeds}",
        title_justify="left",
    )
    for column in ("method", "best eval loss, median", "spread", "per seed", "steps / random's",
                   f"best within {TARGET_SHARE:g}x random's steps, median",
                   "steps to reach random's median best / random's steps, per seed", "wall s, median"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console = Console(width=200)
    console.print(table)
    if len(outcomes.get("optuna", [])) > 1:
        loop = [o.best for o in outcomes["optuna"]]
        figures["against_the_loop"] = {}
        for method in (m for m in methods if m not in ("optuna", "random")):
            paired = paired_difference([o.best for o in outcomes[method]], loop)
            figures["against_the_loop"][method] = paired
            console.print(
                f"{method} minus the Optuna loop, seed by seed: mean {paired['mean']:+.4f} "
                f"(95% interval {paired['low']:+.4f} to {paired['high']:+.4f}); better on {paired['better']}, "
                f"worse on {paired['worse']}, equal on {paired['equal']} seeds"
            )
    if "prior" in methods and "asha" in methods and len(outcomes["asha"]) > 1:
        print_prior_against_the_default(console, settings, outcomes, figures)
    print_anytime(console, settings, methods, outcomes, random_by_seed, figures)
    if baseline is not None:
        print_exact_match(console, settings, methods, outcomes, random_by_seed, baseline, figures)
    if args.plot:
        png = plot_anytime(
            {m: outcomes[m] for m in methods}, settings.random_steps, args.plot,
            f"best so far against steps: {args.trials}-trial random search's steps = 1, seeds {args.seeds}",
        )
        console.print(f"anytime plot: {args.plot}" + (f" and {png}" if png else " (no PNG: kaleido found no browser)"))
    console.print(
        f"task {args.task}: rank correlation by rung (Spearman, a trial's eval loss at the rung vs at max_steps, "
        f"random search's {len(histories)} trials of all seeds): " + ", ".join(f"step {s}: {c:.2f}" for s, c in by_rung.items())
        + "; per seed: " + "; ".join(
            f"seed {seed}: " + ", ".join(f"{c:.2f}" for c in found.values()) for seed, found in by_rung_per_seed.items()
        )
    )
    console.print(
        "rank correlation by rung against the trial's best eval loss: " + ", ".join(f"step {s}: {c:.2f}" for s, c in to_best.items())
        + f"; among the best 1/{RANK_ETA} of the trials ({len(histories) // RANK_ETA}): "
        + ", ".join(f"step {s}: {c:.2f}" for s, c in among_best.items())
    )
    console.print(f"random search's median best (the target): {target:.4f}")
    places = {seed: best_trial_ranks(h, rungs) for seed, h in sorted(random_by_seed.items())}
    figures["best_trial_rank"] = places
    console.print(
        "rank of random search's best trial among its trials at each rung step (1 = ahead), per seed: "
        + "; ".join(f"seed {seed}: " + ", ".join(f"step {s}: {r}" for s, r in ranks.items()) for seed, ranks in places.items())
    )
    console.print(f"machine: {machine()}")
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
