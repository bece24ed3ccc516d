"""Searcher and scheduler for a plan: Ray Tune's OptunaSearch, told the truth about
early-stopped trials, and an ASHA (by promotion or by stopping) / median-stopping
scheduler on training steps."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.trial import TrialState
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule
from ray.tune.search.optuna import OptunaSearch

from sweeper.plan import SweepPlan
from sweeper.promotion import PromotionASHA, SlotLimiter
from sweeper.space import make_sampler, to_optuna_distributions
from sweeper.spec import SweepSpec

__all__ = ["make_search", "make_searcher", "make_scheduler", "StepAwareOptunaSearch", "TIME_ATTR"]

TIME_ATTR = "step"


class StepAwareOptunaSearch(OptunaSearch):
    """OptunaSearch that reports intermediate values at the training step and tells
    Optuna that a trial stopped by the scheduler was PRUNED.

    Ray's OptunaSearch reports at `training_iteration` and marks a stopped trial
    COMPLETE with its early value, so TPE ranks a 10-step loss beside 100-step ones.
    Marked PRUNED, Optuna's TPE ranks it by the step it reached, as in-process Optuna
    with a pruner does.
    """

    def __init__(self, *args, max_steps: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._max_steps = max_steps

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._completed_trials or self.metric not in result or self._told_before(trial_id):
            return
        value = result[self.metric]
        if math.isfinite(value):
            self._ot_trials[trial_id].report(value, result[TIME_ATTR])

    def _told_before(self, trial_id: str) -> bool:
        """Optuna has the trial's end already, though this searcher's saved state does not
        (a driver killed after telling it and before Tune saved): it is not reported to
        or told again."""
        ot_trial = self._ot_trials.get(trial_id)
        return ot_trial is not None and self._ot_study.get_trials(deepcopy=False)[ot_trial.number].state.is_finished()

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot_trial = self._ot_trials[trial_id]
        if self._told_before(trial_id):
            # Told before: Tune also calls this for trials it stops when the sweep is
            # stopped; such a trial, continued by `sweep resume`, stays as first told.
            self._completed_trials.add(trial_id)
            return
        value = (result or {}).get(self.metric)
        reached = (result or {}).get(TIME_ATTR, 0)
        if error or (value is not None and not math.isfinite(value)):
            state, value = TrialState.FAIL, None
        elif value is None or reached < self._max_steps:
            state, value = TrialState.PRUNED, None  # Optuna records the last intermediate value
        else:
            state = TrialState.COMPLETE
        self._ot_study.tell(ot_trial, value, state=state)
        self._completed_trials.add(trial_id)


def optuna_storage_url(sweep_dir: Path) -> str:
    return f"sqlite:///{Path(sweep_dir) / 'optuna.db'}"


def make_searcher(spec: SweepSpec, sweep_dir: Path) -> StepAwareOptunaSearch | None:
    """Seeded Optuna search over the spec's dotted paths, with its study kept beside the
    sweep (optuna-dashboard, resume, warm starts). None when nothing is searched (a
    single run of a fixed config, such as a best_config.yaml)."""
    if not spec.search.parameters:
        return None
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(optuna_storage_url(sweep_dir))
    return StepAwareOptunaSearch(
        space=to_optuna_distributions(spec),
        metric=spec.search.metric,
        mode=_mode(spec),
        sampler=make_sampler(spec),
        study_name=spec.name,
        storage=storage,
        max_steps=spec.training.max_steps,
    )


def make_search(plan: SweepPlan, sweep_dir: Path):
    """(search_alg, scheduler, max_concurrent_trials) for the TuneConfig. With ASHA by
    promotion the concurrency limit is the scheduler's (SlotLimiter): paused trials hold
    no slot; otherwise Tune's own limiter counts running trials."""
    searcher = make_searcher(plan.spec, sweep_dir)
    scheduler = make_scheduler(plan, searched=searcher is not None)
    if isinstance(scheduler, PromotionASHA):
        return SlotLimiter(searcher, scheduler), scheduler, None
    return searcher, scheduler, plan.concurrent_trials


def make_scheduler(plan: SweepPlan, searched: bool = True):
    """The early-stopping scheduler. ASHA by promotion needs a searcher to hold back new
    trials while promoted ones wait for a slot; a sweep of one fixed config (no
    search.parameters) gets ASHA by stopping instead."""
    spec = plan.spec
    stopping = spec.early_stopping
    common = dict(time_attr=TIME_ATTR, metric=spec.search.metric, mode=_mode(spec))
    if stopping.scheduler == "asha" and searched:
        return PromotionASHA(
            **common,
            milestones=plan.rungs,
            reduction_factor=stopping.reduction_factor,
            num_trials=spec.search.num_trials,
            slots=plan.concurrent_trials,
        )
    if stopping.scheduler in ("asha", "asha_stopping"):
        return ASHAScheduler(
            **common,
            max_t=spec.training.max_steps,
            grace_period=stopping.grace_period,
            reduction_factor=stopping.reduction_factor,
        )
    if stopping.scheduler == "median":
        return MedianStoppingRule(**common, grace_period=stopping.grace_period, min_samples_required=3)
    return FIFOScheduler()


def _mode(spec: SweepSpec) -> str:
    return "min" if spec.search.goal == "minimize" else "max"
