"""The names of what a trial reports at each evaluation: one spelling for the training
loops that report them and for the driver, tracking and reports that read them.

Pure Python: the driver and the read-only commands import it without torch or Ray.
"""

from __future__ import annotations

__all__ = [
    "STEP", "EVAL_LOSS", "EVAL_PERPLEXITY", "TRAIN_LOSS", "LEARNING_RATE", "TOKENS_PER_SECOND",
    "TRAIN_TOKENS", "TRAIN_SECONDS", "TRAIN_CPU_SHARE", "SETUP_SECONDS", "FIRST_STEP_SECONDS", "SETUP_PHASES", "RESTARTS",
    "PREEMPTIONS", "PREEMPTED_AT_STEP", "PREEMPTION_CHECKPOINT",
    "OUT_OF_MEMORY_AT_MICRO_BATCH", "MICRO_BATCH", "EVAL_REWARDS_CHOSEN",
    "EVAL_REWARDS_REJECTED", "EVAL_REWARDS_MARGIN", "EVAL_REWARDS_ACCURACY", "TASK_METRICS", "REPORTED_KEYS",
    "GENERATION_PREFIX", "GENERATED_ANSWERS", "GENERATION_METRICS", "GENERATION_SECONDS", "is_reported",
    "EVAL_REWARD", "EVAL_REWARD_STD", "EVAL_FRAC_REWARD_ZERO_STD", "EVAL_KL", "EVAL_COMPLETION_LENGTH", "TRAIN_REWARD",
    "REWARD_PREFIX", "GRPO_METRICS", "reward_metric", "before_training",
]

# The optimizer step a report was taken at (Tune's time attribute); 0 for an evaluation
# before the first step (before_training).
STEP = "step"
EVAL_LOSS = "eval_loss"
EVAL_PERPLEXITY = "eval_perplexity"
TRAIN_LOSS = "train_loss"
LEARNING_RATE = "learning_rate"
TOKENS_PER_SECOND = "tokens_per_second"
TRAIN_TOKENS = "train_tokens"
# The loop's own training time since its previous report (its steps, not evaluation or
# checkpoint): what the calibration times where a trainer counts no tokens (trl's ORPO, CPO).
TRAIN_SECONDS = "train_seconds"
TRAIN_CPU_SHARE = "train_cpu_share"
# From the trial's start to the end of its first optimizer step (an evaluation before that
# step included); in the first report after that step.
SETUP_SECONDS = "setup_seconds"
# The first optimizer step's own time (in setup_seconds too): the calibration takes it off
# the training time of its one report to time a steady step.
FIRST_STEP_SECONDS = "first_step_seconds"
SETUP_PHASES = "setup_phases"  # first report only: where the setup time went
# Times Tune retried the trial from its latest checkpoint after it failed (a lost node, an
# out-of-memory kill; search.max_failures): added to the reports after the first retry by
# the driver (sweeper/run/_driver.py), not the loops.
RESTARTS = "restarts"
# A trial moved off a node that was being taken away (trainables/preemption.py): how
# often, and the optimizer step of its latest move; reported from the first evaluation
# after the first move. PREEMPTION_CHECKPOINT marks the checkpoint kept at that step: a
# report of Train's only, never Tune's (it is no evaluation).
PREEMPTIONS = "preemptions"
PREEMPTED_AT_STEP = "preempted_at_step"
PREEMPTION_CHECKPOINT = "preemption_checkpoint"
# Set once a step ran out of accelerator memory and the trial went on at half the
# micro-batch (trainables/out_of_memory.py): the micro-batch that did not fit, and the one
# the trial trains at since (with twice the gradient accumulation).
OUT_OF_MEMORY_AT_MICRO_BATCH = "out_of_memory_at_micro_batch"
MICRO_BATCH = "micro_batch"
EVAL_REWARDS_CHOSEN = "eval_rewards_chosen"
EVAL_REWARDS_REJECTED = "eval_rewards_rejected"
EVAL_REWARDS_MARGIN = "eval_rewards_margin"
EVAL_REWARDS_ACCURACY = "eval_rewards_accuracy"

# GRPO (trl.method grpo, trainables/grpo.py): at each evaluation the mean reward of the
# completions sampled for the fixed eval prompts, its std, the share of prompt groups whose
# rewards are all equal (no advantage, nothing learnt from them), the KL to the base
# (trl.beta > 0 only) and the mean completion length; each reward function's mean as
# eval_reward_<function>; train_reward: the mean reward of the training completions.
EVAL_REWARD = "eval_reward"
EVAL_REWARD_STD = "eval_reward_std"
EVAL_FRAC_REWARD_ZERO_STD = "eval_frac_reward_zero_std"
EVAL_KL = "eval_kl"
EVAL_COMPLETION_LENGTH = "eval_completion_length"
TRAIN_REWARD = "train_reward"
REWARD_PREFIX = EVAL_REWARD + "_"


def reward_metric(function_name: str) -> str:
    """The reported name of one reward function's mean: `correct` -> `eval_reward_correct`."""
    return REWARD_PREFIX + function_name


# Task metrics from generation (trainables/task_metrics.py), at the steps generation.when
# names: the built-in scores, and a user scorer's keys, each under this prefix.
GENERATION_PREFIX = "gen_"
GENERATION_METRICS = ("gen_exact_match", "gen_contains", "gen_chrf")
# A report's sample answers, as JSON text: [{"prompt", "reference", "answer"}, ...]; not a metric.
GENERATED_ANSWERS = "generated_answers"
# Seconds the report's generation pass over the sample took (what the calibration times).
GENERATION_SECONDS = "generation_seconds"

# Metrics each task reports at every evaluation, with the goal that makes sense for each
# (what `search.metric` may name).
TASK_METRICS: dict[str, dict[str, str]] = {
    "sft": {
        EVAL_LOSS: "minimize",
        EVAL_PERPLEXITY: "minimize",
        TRAIN_LOSS: "minimize",
    },
    "dpo": {
        EVAL_LOSS: "minimize",
        EVAL_REWARDS_ACCURACY: "maximize",
        EVAL_REWARDS_MARGIN: "maximize",
        EVAL_REWARDS_CHOSEN: "maximize",
        EVAL_REWARDS_REJECTED: "minimize",
        TRAIN_LOSS: "minimize",
    },
}
# What a GRPO trial reports at every evaluation that search.metric may name (each reward
# function's eval_reward_<function> too, maximize); its loss is no measure of progress.
GRPO_METRICS: dict[str, str] = {
    EVAL_REWARD: "maximize",
    EVAL_FRAC_REWARD_ZERO_STD: "minimize",
    TRAIN_REWARD: "maximize",
}

# Every key a trial's report may carry; everything else in a Tune result is Tune's.
REPORTED_KEYS: tuple[str, ...] = (
    STEP,
    EVAL_LOSS,
    EVAL_PERPLEXITY,
    EVAL_REWARDS_CHOSEN,
    EVAL_REWARDS_REJECTED,
    EVAL_REWARDS_MARGIN,
    EVAL_REWARDS_ACCURACY,
    EVAL_REWARD,
    EVAL_REWARD_STD,
    EVAL_FRAC_REWARD_ZERO_STD,
    EVAL_KL,
    EVAL_COMPLETION_LENGTH,
    TRAIN_REWARD,
    TRAIN_LOSS,
    LEARNING_RATE,
    TOKENS_PER_SECOND,
    TRAIN_TOKENS,
    TRAIN_SECONDS,
    TRAIN_CPU_SHARE,
    SETUP_SECONDS,
    FIRST_STEP_SECONDS,
    SETUP_PHASES,
    RESTARTS,
    PREEMPTIONS,
    PREEMPTED_AT_STEP,
    OUT_OF_MEMORY_AT_MICRO_BATCH,
    MICRO_BATCH,
    *GENERATION_METRICS,
    GENERATED_ANSWERS,
    GENERATION_SECONDS,
)


def is_reported(key: str) -> bool:
    """Whether `key` of a Tune result is the trial's own report (a user scorer's gen_
    metrics and each GRPO reward function's mean included), not Tune's."""
    return key in REPORTED_KEYS or key.startswith((GENERATION_PREFIX, REWARD_PREFIX))


def before_training(report: dict) -> bool:
    """Whether `report` is an evaluation before the trial's first optimizer step (step 0,
    trl.eval_on_start): the base model's, its adapters a no-op still. The driver records
    it, MLflow keeps it at step 0 and the curves start from it; the rungs, the search's
    intermediate values and median stopping leave it out, since it says nothing of the
    trial's hyperparameters."""
    return report.get(STEP) == 0
