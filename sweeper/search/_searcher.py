"""Searcher and scheduler for a plan: an Optuna study driven through Ray Tune's public
`Searcher` interface and Optuna's ask-and-tell API, and an ASHA (by promotion or by
stopping) / median-stopping scheduler on training steps."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher

import sweeper.names as names  # its TrialState beside Optuna's
from sweeper.plan import SweepPlan
from sweeper.search._asha import PromotionASHA, SlotLimiter
from sweeper.search._mirrored_storage import MirroredStorage
from sweeper.search._objectives import objectives_of
from sweeper.search._space import (
    conditional_distributions,
    config_values,
    make_sampler,
    suggest_conditional,
    to_optuna_distributions,
)
from sweeper.search._study import (
    REPEAT_ATTR,
    STARTUP_ATTR,
    STUDY_FILE,
    TIME_ATTR,
    TUNE_TRIAL_ID_ATTR,
    WARM_START_ATTR,
    copy_study,
    file_of_study_url,
    study_url,
)
from sweeper.search._tune_state import SavedASHAScheduler, SavedFIFOScheduler, SavedMedianStoppingRule, SavedPromotionASHA
from sweeper.spec import SweepSpec, most_trials, prune_metric, reported_every_evaluation
from trainables.metrics import before_training

__all__ = ["make_search", "make_searcher", "make_scheduler", "StepAwareOptunaSearch", "optuna_searcher"]


class StepAwareOptunaSearch(Searcher):
    """A Tune searcher over an Optuna study that reports every evaluation of a trial as an
    intermediate value at its training step and tells Optuna the truth about how it ended:
    COMPLETE with its last value when it trained to `max_steps`, PRUNED when the scheduler
    stopped it earlier (Optuna keeps its last intermediate value, as with its own pruners),
    FAIL when it failed or its metric is not finite.

    Tune passes the result a trial is stopped on only to `on_trial_complete`, not to
    `on_trial_result`; that result is reported there before the trial is told, so a trial
    stopped at its first evaluation still carries its value.

    The study is the state: this searcher keeps only the Tune-to-Optuna trial mapping
    and each trial's marks (the user attributes it gave the trial's Optuna trial, see
    sweeper/search/_study.py), which the driver reads through `marks`. It writes both to
    the study as it goes and rebuilds them from there when restored, so a trial Optuna
    has already finished (a driver killed after telling it and before Tune saved its
    state) is neither reported to nor told again, and a restored trial keeps its marks.

    Each experiment checkpoint of Tune's holds a copy of the study (`save_to_dir`), which
    Tune uploads to storage.uri with its own state: a sweep whose folder is lost resumes
    from storage alone, its study consistent with Tune's trials (`sweep resume --storage`).
    """

    conditional: dict = {}  # none, for a searcher unpickled from a state that does not hold them

    def __init__(
        self,
        *,
        space: dict[str, optuna.distributions.BaseDistribution],
        metric: str,
        mode: str,
        sampler: optuna.samplers.BaseSampler,
        max_steps: int,
        study_name: str | None = None,
        storage_url: str | None = None,
        warm_start=None,
        startup_trials: int = 0,
        conditional: dict | None = None,
        reported_every_result: bool = True,
        objectives=None,
    ):
        # `metric` is what Optuna is told. Tune requires a searcher's metric in every
        # result; one reported only at some evaluations (a task metric generated at the
        # end) is not named to Tune (`reported_every_result` false).
        super().__init__(metric=metric if reported_every_result else None, mode=mode)
        self.objective = metric
        # A sweeper.search._objectives.Objectives: a multi-objective study, told each
        # finished trial's values of every objective (no intermediate values: Optuna's
        # multi-objective trials take none); `metric`, the first, is the rungs'.
        self.objectives = objectives
        self.space, self.sampler, self.max_steps = space, sampler, max_steps
        # Study name -> (parent path, value, distribution): drawn where the trial drew value
        # (sweeper/search/space.py::conditional_distributions).
        self.conditional = conditional or {}
        self.startup_trials = startup_trials
        self.study_name, self.storage_url = study_name, storage_url
        # A sweeper.search._warm_start.WarmStart: seeds the study once, while it is new.
        self.warm_start = warm_start
        self._open_study()

    def _open_study(self) -> None:
        # Read from memory, written through to the file: a SQLite study re-read every
        # paused trial at each ask (sweeper/search/_mirrored_storage.py).
        self.storage = MirroredStorage(self.storage_url) if self.storage_url else optuna.storages.InMemoryStorage()
        self.study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=self.sampler,
            **({"directions": self.objectives.directions} if self.objectives else
               {"direction": "minimize" if self.mode == "min" else "maximize"}),
            load_if_exists=True,
        )
        self.study_name = self.study.study_name
        if self.objectives and not self.study.metric_names:
            self.study.set_metric_names(list(self.objectives.metrics))
        if self.warm_start and not self.study.get_trials(deepcopy=False):
            self.study.add_trials(self.warm_start.trials)
            for params, source in self.warm_start.first_configs:
                repeat = {REPEAT_ATTR: True} if source in self.warm_start.repeats else {}
                self.study.enqueue_trial(params, user_attrs={WARM_START_ATTR: source, **repeat})
        self.warm_start = None
        # Tune trial id -> (Optuna trial number, its storage id); steps reported per trial.
        self.trials: dict[str, tuple[int, int]] = {}
        self.reported: dict[str, set[int]] = {}
        self.finished: set[str] = set()
        # Tune trial id -> the user attributes of its Optuna trial (the trial's marks).
        self._marks: dict[str, dict] = {}
        for frozen in self.study.get_trials(deepcopy=False):
            tune_id = frozen.user_attrs.get(TUNE_TRIAL_ID_ATTR)
            if tune_id is None:
                if frozen.state == TrialState.RUNNING:
                    # Asked by a driver killed before it named the trial's Tune trial: no
                    # Tune trial will ever report to it, and Optuna would show it running.
                    self.study.tell(frozen.number, state=TrialState.FAIL)
                continue
            self.trials[tune_id] = (frozen.number, self._storage_id(frozen.number))
            self.reported[tune_id] = set(frozen.intermediate_values)
            self._marks[tune_id] = dict(frozen.user_attrs)
            if frozen.state.is_finished():
                self.finished.add(tune_id)

    def marks(self, trial_id: str) -> dict:
        """What the searcher marked Tune trial `trial_id` with when it suggested it: the
        user attributes of its Optuna trial (sweeper/search/_study.py: TUNE_TRIAL_ID_ATTR,
        STARTUP_ATTR, WARM_START_ATTR, REPEAT_ATTR); empty for a trial it never suggested."""
        return dict(self._marks.get(trial_id, {}))

    @property
    def unranked(self) -> set[str]:
        """The Tune trials that ASHA by promotion lets train to max_steps unranked: those
        that repeat a run completed in an earlier sweep (warm start), and the sweep's first
        `startup_trials` others."""
        return {t for t, marks in self._marks.items() if marks.get(REPEAT_ATTR) or marks.get(STARTUP_ATTR)}

    def __getstate__(self) -> dict:
        # Tune pickles the searcher with the tuner: the study lives in its storage.
        from_study = ("storage", "study", "trials", "reported", "finished", "_marks")
        return {k: v for k, v in self.__dict__.items() if k not in from_study}

    def __setstate__(self, state: dict) -> None:
        state.setdefault("objective", state.get("_metric"))
        state.setdefault("objectives", None)
        self.__dict__.update(state)
        # Tune unpickles the searcher of a resumed sweep with the study path of the driver
        # that started it, which may be another folder or machine: no database is made
        # there; `sweep resume` points it at the sweep's study first (`use_study`).
        study_file = self._study_file()
        if study_file is None or study_file.is_file():
            self._open_study()

    def _study_file(self) -> Path | None:
        """The study's SQLite file (None for a study in memory)."""
        return file_of_study_url(self.storage_url) if self.storage_url else None

    def use_study(self, storage_url: str) -> None:
        """Continue with the study at `storage_url` (a resumed sweep's folder)."""
        self.storage_url = storage_url
        self._open_study()

    def save(self, checkpoint_path: str) -> None:
        """The sampler (its random state); everything else is in the study."""
        with open(checkpoint_path, "wb") as file:
            pickle.dump({"sampler": self.sampler}, file)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as file:
            self.sampler = pickle.load(file)["sampler"]
        self._open_study()

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        """Tune's experiment checkpoint (Tune uploads `checkpoint_dir` to storage.uri's
        `tune/`): the sampler, as `Searcher` saves it, and a copy of the study."""
        super().save_to_dir(checkpoint_dir, session_str)
        study_file = self._study_file()
        if study_file is not None and study_file.is_file():
            copy_study(study_file, Path(checkpoint_dir) / STUDY_FILE)

    def suggest(self, trial_id: str) -> dict | None:
        if trial_id in self.trials:  # asked before a restore
            number, _ = self.trials[trial_id]
            return config_values(self.study.get_trials(deepcopy=False)[number].params)
        ot_trial = self.study.ask(fixed_distributions=self.space)
        suggest_conditional(ot_trial, self.conditional)
        ot_trial.set_user_attr(TUNE_TRIAL_ID_ATTR, trial_id)
        self.trials[trial_id] = (ot_trial.number, self._storage_id(ot_trial.number))
        self.reported[trial_id] = set()
        # A repeat (an enqueued warm-start config) is unranked already.
        startup = sum(1 for marks in self._marks.values() if marks.get(STARTUP_ATTR))
        if not ot_trial.user_attrs.get(REPEAT_ATTR) and startup < self.startup_trials:
            ot_trial.set_user_attr(STARTUP_ATTR, True)
        # Optuna's trial keeps what was set on it (and what enqueue_trial gave it) in memory.
        self._marks[trial_id] = ot_trial.user_attrs
        return config_values(ot_trial.params)

    def _storage_id(self, number: int) -> int:
        study_id = self.storage.get_study_id_from_name(self.study_name)
        return self.storage.get_trial_id_from_study_id_trial_number(study_id, number)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self._report(trial_id, result)

    def _report(self, trial_id: str, result: dict | None) -> None:
        """The evaluation in `result` as an intermediate value at its training step, once
        per step (a trial continued from a checkpoint reports its last step again); not
        one before the first step (`before_training`: the base model's, the same for every config)."""
        if trial_id not in self.trials or trial_id in self.finished or not result or self.objectives:
            return
        if before_training(result):
            return
        value, step = result.get(self.objective), result.get(TIME_ATTR)
        if value is None or step is None or not math.isfinite(value) or step in self.reported[trial_id]:
            return
        self.storage.set_trial_intermediate_value(self.trials[trial_id][1], int(step), float(value))
        self.reported[trial_id].add(step)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.trials or trial_id in self.finished:
            # Finished before: Tune also calls this for trials it stops when the sweep is
            # stopped; such a trial, continued by `sweep resume`, stays as first told.
            return
        self._report(trial_id, result)
        value = (result or {}).get(self.objective)
        reached = (result or {}).get(TIME_ATTR, 0)
        if error or (value is not None and not math.isfinite(value)):
            state, value = TrialState.FAIL, None
        elif value is None or reached < self.max_steps:
            state, value = TrialState.PRUNED, None  # Optuna records the last intermediate value
        else:
            state = TrialState.COMPLETE
        if self.objectives and state == TrialState.COMPLETE:
            number = self.trials[trial_id][0]
            values = self.objectives.values(result, self.study.get_trials(deepcopy=False)[number].params)
            state, value = (TrialState.COMPLETE, values) if None not in values else (TrialState.FAIL, None)
        self.study.tell(self.trials[trial_id][0], value, state=state)
        self.finished.add(trial_id)


    def reconcile(self, book) -> None:
        """For `sweep resume`: what `book` (rebuilt from MLflow) holds and the study does
        not (the last driver died between the two) is told now: every trial's reports, and
        the end of a trial that has finished. A trial whose last report MLflow recorded
        just before the loss may never report again: the rungs, rebuilt from MLflow, can
        prune it where it waits."""
        for trial_id, record in book.trials.items():
            if trial_id not in self.trials or trial_id in self.finished:
                continue
            for report in record.history:
                self._report(trial_id, report)
            if record.finished:
                last = record.history[-1] if record.history else None
                self.on_trial_complete(trial_id, last, error=record.state == names.TrialState.FAILED)


def optuna_searcher(search_alg) -> StepAwareOptunaSearch | None:
    """The StepAwareOptunaSearch inside `search_alg` and its wrappers (the slot limiter,
    the budget's searcher: each keeps the searcher it wraps as `searcher`, as Ray's
    ConcurrencyLimiter does); None where there is none (nothing searched)."""
    while search_alg is not None and not isinstance(search_alg, StepAwareOptunaSearch):
        search_alg = getattr(search_alg, "searcher", None)
    return search_alg


def make_searcher(spec: SweepSpec, sweep_dir: Path, warm_start=None) -> StepAwareOptunaSearch | None:
    """Seeded Optuna search over the spec's dotted paths, with its study kept beside the
    sweep (optuna-dashboard, resume, warm starts). None when nothing is searched (a
    single run of a fixed config, such as a best_config.yaml). `warm_start` (a
    sweeper.search._warm_start.WarmStart) seeds a new study."""
    if not spec.search.parameters:
        return None
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    return StepAwareOptunaSearch(
        space=to_optuna_distributions(spec),
        conditional=conditional_distributions(spec),
        metric=spec.search.metric,
        mode=_mode(spec),
        sampler=make_sampler(spec),
        study_name=spec.name,
        storage_url=study_url(sweep_dir),
        max_steps=spec.training.max_steps,
        warm_start=warm_start,
        startup_trials=spec.early_stopping.startup_trials_for(),
        reported_every_result=reported_every_evaluation(spec, spec.search.metric),
        objectives=objectives_of(spec),
    )


def make_search(plan: SweepPlan, sweep_dir: Path, warm_start=None):
    """(search_alg, scheduler, max_concurrent_trials) for the TuneConfig. With ASHA by
    promotion the concurrency limit is the scheduler's (SlotLimiter): paused trials hold
    no slot; otherwise Tune's own limiter counts running trials."""
    searcher = make_searcher(plan.spec, sweep_dir, warm_start)
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
    grace_period = spec.grace_period()
    metric, goal = prune_metric(spec)  # search.metric, or eval loss where it is not reported at every evaluation
    common = dict(time_attr=TIME_ATTR, metric=metric, mode="min" if goal == "minimize" else "max")
    if stopping.scheduler == "asha" and searched:
        return SavedPromotionASHA(
            **common,
            milestones=plan.rungs,
            reduction_factor=stopping.reduction_factor_for(),
            num_trials=most_trials(spec),
            slots=plan.concurrent_trials,
        )
    if stopping.scheduler in ("asha", "asha_stopping"):
        return SavedASHAScheduler(
            **common,
            max_t=spec.training.max_steps,
            grace_period=grace_period,
            reduction_factor=stopping.reduction_factor_for(),
        )
    if stopping.scheduler == "median":
        return SavedMedianStoppingRule(**common, grace_period=grace_period, min_samples_required=3)
    return SavedFIFOScheduler()


def _mode(spec: SweepSpec) -> str:
    return "min" if spec.search.goal == "minimize" else "max"
