"""The Pareto front of a multi-objective sweep (search.objectives), as its Optuna study
holds it: the values each completed trial was told with, the objectives' names and
directions. `sweep status` and the report read it from the sweep folder; no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.search.objectives import pareto_front

__all__ = ["Front", "study_front"]


@dataclass(frozen=True)
class Front:
    metrics: list[str]
    goals: list[str]
    points: list[tuple[str, list[float]]]  # (Tune trial id, values) of each completed trial
    front: list[str]  # the Tune trial ids on the Pareto front, in trial order


def study_front(sweep_dir: str | Path, name: str) -> Front | None:
    """The front of sweep `name`'s study in `sweep_dir`; None where the folder holds no
    study of several objectives (a single-objective sweep, a folder on another machine)."""
    import optuna

    from sweeper.search.study import STUDY_FILE, TUNE_TRIAL_ID_ATTR, study_url

    if not (Path(sweep_dir) / STUDY_FILE).is_file():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=study_url(Path(sweep_dir)))
    except KeyError:  # no study of that name
        return None
    if len(study.directions) < 2:
        return None
    goals = ["minimize" if d == optuna.study.StudyDirection.MINIMIZE else "maximize" for d in study.directions]
    metrics = study.metric_names or [f"objective {i}" for i in range(len(goals))]
    points = [
        (t.user_attrs.get(TUNE_TRIAL_ID_ATTR, str(t.number)), list(t.values))
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ]
    front = [trial_id for trial_id, _ in pareto_front(points, lambda p: p[1], goals)]
    return Front(metrics, goals, points, front)
