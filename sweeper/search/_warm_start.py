"""Warm starts from earlier sweeps (`search.warm_start`): what the earlier sweeps' Optuna
studies give a new search, read before anything starts.

Their finished trials (completed and pruned, with their evaluations by training step) are
added to the new study as history, so that the sampler models them from its first trial;
the best `top_k` configs of each are enqueued to run first. A first config that trains
the very run that completed in the earlier sweep (every searched value given, the rest of
the trial's config the same) is a repeat: under ASHA by promotion it goes on from every
rung without taking a place there (sweeper/search/_asha.py), so the new sweep keeps the
earlier best instead of pruning it on an early evaluation. Only what fits the new search
space goes in: a parameter the new space does not search, or a value outside its range,
is left out of the trial it belongs to, with one note per sweep and parameter. The
seeding itself (Optuna's `add_trials` and `enqueue_trial`) is the searcher's, once, when
its study is new (sweeper/search/_searcher.py).

Imports neither Ray nor torch (`sweep validate` reads the earlier studies too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import UserError
from sweeper.search._space import config_values, optuna_space
from sweeper.search._study import STUDY_FILE, TUNE_TRIAL_ID_ATTR, WARM_START_ATTR, study_file, study_url
from sweeper.spec import SweepSpec, WarmStartSpec

__all__ = ["WarmStart", "read_warm_start"]


@dataclass
class WarmStart:
    """What seeds a new study: `trials` to add as history, `first_configs` (params,
    source) to enqueue, best first, `repeats` (the sources of first configs that repeat
    a completed earlier run), and `notes` on what was left out."""

    trials: list[FrozenTrial] = field(default_factory=list)
    first_configs: list[tuple[dict, str]] = field(default_factory=list)
    repeats: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.trials or self.first_configs)

    def lines(self) -> list[str]:
        """What `sweep start` says of it (rich markup): a note per thing left out, then
        what went in."""
        from rich.markup import escape

        lines = [f"[yellow]note:[/yellow] {escape(note)}" for note in self.notes]
        if self:
            lines.append(f"Warm start: {len(self.trials)} earlier trials added to the search, "
                         f"{len(self.first_configs)} of their best configs run first")
        return lines


def read_warm_start(spec: SweepSpec) -> WarmStart:
    """The seed of `spec`'s search from the sweeps in `search.warm_start` (empty without
    any). Raises UserError (key search.warm_start.<i>.sweep) for a sweep that is missing,
    has no study, is this sweep itself, or optimised in the other direction."""
    seed = WarmStart()
    if not spec.search.warm_start or not spec.search.parameters:
        return seed
    space = optuna_space(spec)  # conditional parameters too, by their names in the study
    minimize = spec.search.goal == "minimize"
    candidates: list[tuple[float, dict, str]] = []
    for index, source in enumerate(spec.search.warm_start):
        key = f"search.warm_start.{index}"
        study = _earlier_study(spec, source, key)
        fitting, notes = _fitting_trials(study, source.sweep, space, key)
        seed.trials.extend(fitting)
        seed.notes.extend(notes)
        completed = [t for t in fitting if t.state == TrialState.COMPLETE and t.params]
        completed.sort(key=lambda t: t.value if minimize else -t.value)
        candidates += [(t.value, t.params, t.user_attrs[WARM_START_ATTR]) for t in completed[: source.top_k]]
        earlier_trial = _earlier_trial_config(_earlier_folder(spec, source))
        seed.repeats |= {
            t.user_attrs[WARM_START_ATTR] for t in completed[: source.top_k]
            if set(t.params) == set(space) and _same_run(earlier_trial, spec, config_values(t.params))
        }
    candidates.sort(key=lambda c: c[0] if minimize else -c[0])
    seen: list[dict] = []
    for _, params, label in candidates:
        if params not in seen:
            seen.append(params)
            seed.first_configs.append((params, label))
    return seed


def _earlier_folder(spec: SweepSpec, source: WarmStartSpec) -> Path:
    return (source.sweep_dir or spec.sweep_dir.parent / source.sweep).resolve()


def _earlier_trial_config(folder: Path):
    """The trial config of the earlier sweep in `folder` (its sweep.yaml), or None when it
    cannot be read (then none of its configs counts as a repeat)."""
    from pydantic import ValidationError

    from sweeper.spec import read_yaml

    try:
        raw = read_yaml(folder / "sweep.yaml")
        # Its data files need not be there any more: only the config is compared.
        earlier = SweepSpec.model_validate(raw, context={"base_dir": folder, "check_files": False})
    except (UserError, ValidationError):
        return None
    return earlier.trial_config()


def _same_run(earlier_trial, spec: SweepSpec, params: dict) -> bool:
    """Whether `params` train the same run in this sweep as in the earlier one."""
    if earlier_trial is None:
        return False
    try:
        return earlier_trial.with_values(params) == spec.trial_config().with_values(params)
    except (ValueError, KeyError):
        return False


def _earlier_study(spec: SweepSpec, source: WarmStartSpec, key: str) -> optuna.Study:
    folder = _earlier_folder(spec, source)
    if source.sweep == spec.name and folder == spec.sweep_dir:
        raise UserError(f"{key}.sweep: a sweep cannot warm-start from itself ({source.sweep!r}); name an earlier sweep")
    if not study_file(folder).is_file():
        raise UserError(
            f"{key}.sweep: no earlier sweep {source.sweep!r} at {folder} (no {STUDY_FILE}); give the name of a "
            f"finished sweep, or its folder as {key}.sweep_dir"
        )
    storage = optuna.storages.RDBStorage(study_url(folder))
    try:
        study = optuna.load_study(study_name=source.sweep, storage=storage)
    except KeyError:
        held = ", ".join(s.study_name for s in storage.get_all_studies()) or "none"
        raise UserError(f"{key}.sweep: {study_file(folder)} holds no study {source.sweep!r}; it holds: {held}") from None
    wanted = optuna.study.StudyDirection.MINIMIZE if spec.search.goal == "minimize" else optuna.study.StudyDirection.MAXIMIZE
    if study.direction != wanted:
        raise UserError(
            f"{key}.sweep: sweep {source.sweep!r} optimised in the other direction ({study.direction.name.lower()}); "
            f"this one has search.goal={spec.search.goal}"
        )
    return study


def _fitting_trials(
    study: optuna.Study, sweep: str, space: dict[str, BaseDistribution], key: str
) -> tuple[list[FrozenTrial], list[str]]:
    """The study's finished trials rebuilt on `space`, and one note per parameter left out."""
    finished = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    not_searched: set[str] = set()
    outside: dict[str, int] = {}
    rebuilt = []
    for trial in finished:
        params = {}
        for name, value in trial.params.items():
            if name not in space:
                not_searched.add(name)
            elif not _within(space[name], value):
                outside[name] = outside.get(name, 0) + 1
            else:
                params[name] = value
        rebuilt.append(optuna.trial.create_trial(
            state=trial.state,
            value=trial.value if trial.state == TrialState.COMPLETE else None,
            params=params,
            distributions={name: space[name] for name in params},
            intermediate_values=dict(trial.intermediate_values),
            user_attrs={WARM_START_ATTR: f"{sweep}/{trial.user_attrs.get(TUNE_TRIAL_ID_ATTR, trial.number)}"},
        ))
    notes = [f"{key}: {name} of sweep {sweep!r} is not searched here; left out" for name in sorted(not_searched)]
    notes += [
        f"{key}: {count} of {len(finished)} values of {name} in sweep {sweep!r} lie outside this search's "
        f"{_range_text(space[name])}; left out of those trials"
        for name, count in sorted(outside.items())
    ]
    return rebuilt, notes


def _within(distribution: BaseDistribution, value) -> bool:
    if isinstance(distribution, CategoricalDistribution):
        return value in distribution.choices
    if not isinstance(value, (int, float)) or not distribution.low <= value <= distribution.high:
        return False
    if isinstance(distribution, IntDistribution):
        return value == int(value) and (int(value) - distribution.low) % distribution.step == 0
    return True


def _range_text(distribution: BaseDistribution) -> str:
    if isinstance(distribution, CategoricalDistribution):
        return f"values {list(distribution.choices)}"
    return f"range [{distribution.low:g}, {distribution.high:g}]"

