"""TPE that learns from the trials still running as from trials pruned at their last report.

Optuna's TPE models only finished trials (COMPLETE, PRUNED) and stays random until
`n_startup_trials` of them exist. Under ASHA by promotion most trials are neither: a trial
waiting at a rung is RUNNING in the study, and in a sweep that runs until a budget cap (no
num_trials) no rung closes, so none is pruned before the cap: TPE would draw the sweep's
trials as random search does until the cap. Such a trial's evaluations so far are the
same evidence a pruned trial's are, and TPE already ranks pruned trials by the step they
reached, then by their last value.

So the sampler TPE is wrapped in hands it, at each suggestion, a read-only view of the
study (`ReportsSoFar`, an Optuna `BaseStorage`): the finished trials as they are, and every
other RUNNING trial that has reported as PRUNED at its last report. Trials that have not
reported yet stay out of it, as they stay out of TPE's own reads (with Optuna 5's constant
liar they counted as bad: docs/concepts/asha.md). The study itself is not changed. The view
holds the study's own trial objects, not copies: copying a study trial by trial at each
suggestion grows with the sweep and shows in a driver of thousands of trials
(benchmarks/load.py).
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

__all__ = ["ReportsSoFarSampler", "reports_so_far"]


class ReportsSoFarSampler(optuna.samplers.BaseSampler):
    """Optuna's TPE (`tpe_options`: its seed, `n_startup_trials`) reading
    `reports_so_far(study)` instead of the study. Without Optuna 5's default constant liar,
    which writes to the trials it samples (the view is read-only) and counts every RUNNING
    trial as bad: under ASHA by promotion the trials paused at a rung, waiting because they
    did well, are RUNNING, and TPE would steer away from the best regions."""

    def __init__(self, **tpe_options):
        self.sampler = optuna.samplers.TPESampler(**tpe_options, constant_liar=False)
        # (trial number being sampled, the view made for it): one view per suggestion,
        # not one per parameter (TPE samples each parameter on its own).
        self._view: tuple[int, optuna.Study] | None = None

    def __getstate__(self) -> dict:
        return {"sampler": self.sampler, "_view": None}

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()

    def infer_relative_search_space(self, study, trial):
        return self.sampler.infer_relative_search_space(self._study_for(study, trial), trial)

    def sample_relative(self, study, trial, search_space):
        return self.sampler.sample_relative(self._study_for(study, trial), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.sampler.sample_independent(self._study_for(study, trial), trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self._view = None
        self.sampler.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def _study_for(self, study: optuna.Study, trial) -> optuna.Study:
        if self._view is None or self._view[0] != trial.number:
            self._view = (trial.number, reports_so_far(study, trial.number))
        return self._view[1]


def reports_so_far(study: optuna.Study, sampled: int) -> optuna.Study:
    """`study` as the sampler should see it while it samples trial number `sampled`: its
    finished trials, and its other RUNNING trials that have reported as PRUNED at their
    last report (`study` itself where no such trial exists)."""
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == TrialState.RUNNING and t.intermediate_values and t.number != sampled]
    if not running:
        return study
    shown = [t for t in trials if t.state.is_finished()] + [_pruned_at_last_report(t) for t in running]
    view = ReportsSoFar(study.study_name, study.directions, sorted(shown, key=lambda t: t.number))
    return optuna.Study(study_name=study.study_name, storage=view, sampler=optuna.samplers.RandomSampler())


def _pruned_at_last_report(trial: FrozenTrial) -> FrozenTrial:
    """A copy of the RUNNING `trial`, PRUNED, with its number (TPE weighs its observations
    by their order) and its reports."""
    return FrozenTrial(
        number=trial.number,
        state=TrialState.PRUNED,
        value=None,
        datetime_start=trial.datetime_start,
        datetime_complete=None,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs={},
        system_attrs={},
        intermediate_values=trial.intermediate_values,
        trial_id=-1,  # no storage's
    )


class ReportsSoFar(BaseStorage):
    """A read-only Optuna storage of one study's `trials` (shared, not copied, when read
    without `deepcopy`). Every write is refused: the view is for sampling only."""

    STUDY_ID = 0

    def __init__(self, study_name: str, directions: Sequence[StudyDirection], trials: list[FrozenTrial]):
        self.study_name, self.directions, self.trials = study_name, list(directions), trials

    # ------------------------------------------------------------------ reads

    def get_study_id_from_name(self, study_name: str) -> int:
        return self.STUDY_ID

    def get_study_name_from_id(self, study_id: int) -> str:
        return self.study_name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return list(self.directions)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return {}

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return {}

    def get_all_studies(self) -> list:
        return []

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        trials = self.trials if states is None else [t for t in self.trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else list(trials)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        raise KeyError(f"trial id {trial_id}: the sampler's view of the study reads its trials as a list only")

    # ------------------------------------------------------------------ writes: none

    def _read_only(self, *args, **kwargs):
        raise RuntimeError("the sampler's view of the study is read-only")

    create_new_study = delete_study = set_study_user_attr = set_study_system_attr = _read_only
    create_new_trial = set_trial_param = set_trial_state_values = set_trial_intermediate_value = _read_only
    set_trial_user_attr = set_trial_system_attr = _read_only
