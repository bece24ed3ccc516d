"""One spelling for the words the sweep's parts share: trial states and the `sweeper.*`
MLflow tags that `sweep list/status`, reports and promotion query by. Metric keys live in
`trainables/metrics.py` (the trials report them; trainables imports nothing from here); the
Optuna study's file, URL and attribute keys in `sweeper/search/_study.py`.

Pure Python: the read-only commands import it without Ray, torch or MLflow.
"""

from __future__ import annotations

from enum import StrEnum

from trainables.metrics import REPORTED_KEYS, STEP, TASK_METRICS

__all__ = [
    "TrialState", "SweepStatus", "Tag", "RunKind", "RunMetric", "VersionTag", "REPORTED_KEYS", "STEP", "TASK_METRICS",
    "ForecastKey", "BudgetKey",
]


class TrialState(StrEnum):
    """Where a trial stands. The value is what the tag `sweeper.state` and the store's
    `state` column hold; the words shown to people (`pruned at step 30`, `failed: ...`)
    are a trial's `status_text`, kept in the tag `sweeper.status`."""

    RUNNING = "running"
    PAUSED = "paused"  # waiting at a rung (ASHA by promotion); its slot went to another trial
    COMPLETED = "completed"
    PRUNED = "pruned"
    FAILED = "failed"
    # The sweep was stopped (or its driver died) while the trial ran: `sweep resume`
    # continues it from its latest checkpoint.
    STOPPED = "stopped"

    @property
    def finished(self) -> bool:
        return self in (TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED)


class RunKind(StrEnum):
    """The value of the tag `sweeper.kind`: what an MLflow run of ours is."""

    SWEEP = "sweep"  # the parent run of a sweep
    TRIAL = "trial"  # a child run, one per trial
    PROMOTION = "promotion"  # nested under a trial's run; holds a registered model version


class SweepStatus(StrEnum):
    """The value of the tag `sweeper.status` on a sweep's parent run."""

    RUNNING = "running"
    FINISHED = "finished"  # at least one trial completed
    FAILED = "failed"  # the sweep ended with no completed trial
    STOPPED = "stopped"  # stopped or interrupted: `sweep resume` continues it


class Tag:
    """MLflow tag names. Parent run: KIND=sweep, SWEEP_NAME, METRIC, GOAL, STATUS (a
    SweepStatus), ...; child run: KIND=trial, TRIAL_ID, TRIAL_NUMBER, STATE (a TrialState),
    STATUS (its words)."""

    KIND = "sweeper.kind"
    SWEEP_NAME = "sweeper.sweep_name"
    STATUS = "sweeper.status"
    STATE = "sweeper.state"
    RESTARTED = "sweeper.restarted"  # a trial whose checkpoint did not read on `sweep resume`: why, and from which step
    METRIC = "sweeper.metric"
    GOAL = "sweeper.goal"
    MAX_STEPS = "sweeper.max_steps"
    SEARCH_SPACE = "sweeper.search_space"
    SWEEP_DIR = "sweeper.sweep_dir"
    # storage.uri: the Tune state, the checkpoints, and copies of sweep.yaml and the tokenizer.
    STORAGE_URI = "sweeper.storage_uri"
    BEST_TRIAL_ID = "sweeper.best_trial_id"
    BEST_RUN_ID = "sweeper.best_run_id"
    CONFIG_HASH = "sweeper.config_hash"
    GIT_COMMIT = "sweeper.git_commit"
    HARDWARE = "sweeper.hardware"
    ACCELERATOR = "sweeper.accelerator"
    USD_PER_HOUR = "sweeper.usd_per_hour"
    VERSIONS_PREFIX = "sweeper.versions."
    DATA_SHA256_PREFIX = "sweeper.data_sha256."
    TRIAL_ID = "sweeper.trial_id"
    TRIAL_NUMBER = "sweeper.trial_number"
    CHECKPOINT_PATH = "sweeper.checkpoint_path"
    # A trial whose config an earlier sweep's trial gave (search.warm_start): "<sweep>/<trial id>".
    WARM_START = "sweeper.warm_start"
    # "true" on one of the sweep's first early_stopping.startup_trials trials, which train
    # to max_steps whatever their rank (ASHA by promotion); absent on the others.
    STARTUP_TRIAL = "sweeper.startup_trial"
    # On a confirmation rerun (search.confirm): the number of the search trial whose config
    # it trains again; its seed is its param training.seed.
    CONFIRMS = "sweeper.confirms"
    TASK = "sweeper.task"
    # On a trial that ran out of accelerator memory and went on at half its micro-batch:
    # "out of memory at micro-batch 8, went on at 4".
    OUT_OF_MEMORY = "sweeper.out_of_memory"
    PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's own tag for nested runs
    # The budget cap that cut the sweep (or "none"), and what it cut in words (parent run).
    BUDGET_STOP = "sweeper.budget_stop"
    BUDGET_CUT = "sweeper.budget_cut"
    # A promotion run (sweeper/promote/_registry.py) and the registered model version it creates.
    SOURCE_SWEEP = "sweeper.source_sweep"
    SOURCE_PARENT_RUN_ID = "sweeper.source_parent_run_id"
    SOURCE_TRIAL_RUN_ID = "sweeper.source_trial_run_id"
    SOURCE_TRIAL_ID = "sweeper.source_trial_id"
    SOURCE_TRIAL_NUMBER = "sweeper.source_trial_number"
    REGISTERED_MODEL = "sweeper.registered_model"


class VersionTag:
    """Tags of a registered model version (sweeper/promote/_registry.py), beside Tag.TRIAL_NUMBER,
    Tag.TRIAL_ID, Tag.METRIC and Tag.GOAL, which it shares with the runs."""

    SWEEP = "sweeper.sweep"
    TRIAL_STATE = "sweeper.trial_state"
    METRIC_VALUE = "sweeper.metric_value"
    STEPS = "sweeper.steps"
    COST_USD = "sweeper.cost_usd"
    SWEEP_COST_USD = "sweeper.sweep_cost_usd"
    BASE_MODEL = "sweeper.base_model"
    PARENT_RUN_ID = "sweeper.parent_run_id"
    TRIAL_RUN_ID = "sweeper.trial_run_id"
    PROMOTION_RUN_ID = "sweeper.promotion_run_id"
    MERGED = "sweeper.merged"
    FORCED = "sweeper.forced"


class RunMetric:
    """MLflow metric names our runs hold besides the reported histories
    (`trainables.metrics`). Child run, when the trial ends: WALL_SECONDS ... PAUSES and
    `final_<metric>`; parent run, when the sweep ends: TRIALS_* ... and `best_<metric>`."""

    WALL_SECONDS = "wall_seconds"
    STEPS_TRAINED = "steps_trained"
    PAUSES = "pauses"
    COST_USD = "cost_usd"
    ACCELERATOR_HOURS = "accelerator_hours"
    TOKENS = "tokens"
    SAVED_BY_PRUNING_USD = "cost_usd_saved_by_pruning"  # per trial and the sweep's total
    USD_PER_MILLION_TOKENS = "usd_per_million_tokens"  # per trial and the sweep's
    TRIALS_COMPLETED = "trials_completed"
    TRIALS_PRUNED = "trials_pruned"
    TRIALS_FAILED = "trials_failed"
    TRIALS_TOTAL = "trials_total"
    COST_USD_TOTAL = "cost_usd_total"
    ACCELERATOR_HOURS_TOTAL = "accelerator_hours_total"
    TOKENS_TOTAL = "tokens_total"

    @staticmethod
    def best(metric: str) -> str:
        """The sweep's best value of `metric` (parent run)."""
        return f"best_{metric}"

    @staticmethod
    def final(metric: str) -> str:
        """A trial's last value of `metric` (child run)."""
        return f"final_{metric}"


class ForecastKey:
    """The forecast on the parent run: every figure as a param when the sweep starts, and
    the expected and worst-case totals again as metrics when it ends (`ENDING_METRICS`),
    beside the actual cost, which reports compare them with."""

    STEP_SECONDS = "forecast_step_seconds"
    EVAL_SECONDS = "forecast_eval_seconds"
    GENERATION_SECONDS = "forecast_generation_seconds"  # with a generation section only
    SETUP_SECONDS = "forecast_setup_seconds"
    TIMING_SOURCE = "forecast_timing_source"
    EXPECTED_STEPS = "forecast_expected_steps"
    EXPECTED_WALL_SECONDS = "forecast_expected_wall_seconds"
    EXPECTED_ACCELERATOR_HOURS = "forecast_expected_accelerator_hours"
    EXPECTED_USD = "forecast_expected_usd"
    WORST_STEPS = "forecast_worst_steps"
    WORST_WALL_SECONDS = "forecast_worst_wall_seconds"
    WORST_ACCELERATOR_HOURS = "forecast_worst_accelerator_hours"
    WORST_USD = "forecast_worst_usd"
    # A sweep that runs until a budget cap: the trials its caps buy (the expected case's).
    BUDGET_TRIALS = "forecast_budget_trials"


class LiveForecastKey:
    """The live forecast on the parent run while the sweep runs: metrics logged at every
    evaluation, at step = evaluations seen so far (sweeper/budget/_live_forecast.py); their
    timestamps say when. `forecast_total_*` against the actual `cost_usd_total` and
    `wall_seconds` is how far the estimate was off at that point."""

    REMAINING_SECONDS = "forecast_remaining_s"
    REMAINING_USD = "forecast_remaining_usd"
    TOTAL_SECONDS = "forecast_total_s"
    TOTAL_USD = "forecast_total_usd"
    ELAPSED_SECONDS = "forecast_elapsed_s"
    SPENT_USD = "forecast_spent_usd"
    STEPS_DONE = "forecast_steps_done"  # training steps the trials have reported so far
    STEP_SECONDS = "forecast_live_step_seconds"
    EVAL_SECONDS = "forecast_live_eval_seconds"
    SETUP_SECONDS = "forecast_live_setup_seconds"


class BudgetKey:
    """Metrics of the budget on the parent run when the sweep ends: each cap given
    (`cap("max_usd")` is `budget_max_usd`) and the trials the caps cut."""

    TRIALS_STOPPED = "budget_trials_stopped"
    TRIALS_NOT_STARTED = "budget_trials_not_started"

    @staticmethod
    def cap(key: str) -> str:
        return f"budget_{key}"
