"""What a report is made of: per sweep, its record and polars frames, read once through the
store (`sweeper.track._store.SweepStore`, the one query layer over MLflow)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from sweeper.errors import UserError
from sweeper.names import LiveForecastKey, Tag, TrialState
from sweeper.search import Front, study_front
from sweeper.track import SweepRecord, SweepStore

__all__ = ["SweepData", "load_sweeps", "LIVE_FORECAST_KEYS"]

# What the report draws of the live forecast.
LIVE_FORECAST_KEYS = (
    LiveForecastKey.ELAPSED_SECONDS, LiveForecastKey.REMAINING_SECONDS, LiveForecastKey.TOTAL_USD,
)


@dataclass(frozen=True)
class SweepData:
    record: SweepRecord
    trials: pl.DataFrame  # SweepStore.trials: one row per trial
    params: pl.DataFrame  # SweepStore.trial_params: trial_number + one column per searched parameter
    history: pl.DataFrame  # SweepStore.history of the sweep's metric: trial_number, key, step, value
    best_config_yaml: str | None = None  # the parent's best_config.yaml artifact
    # The live forecast on the parent run (`LiveForecastKey`): step, then a column per key.
    forecast: pl.DataFrame | None = None
    # search.objectives: the Pareto front from the sweep's Optuna study (sweeper.search.study_front).
    front: Front | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def param_names(self) -> list[str]:
        return [c for c in self.params.columns if c != "trial_number"]

    def count(self, state: TrialState) -> int:
        return self.trials.filter(pl.col("state") == state).height


def load_sweeps(store: SweepStore, names: list[str]) -> list[SweepData]:
    """Every named sweep; a UserError names each unknown one (and lists the known ones)."""
    runs, problems = [], []
    for name in dict.fromkeys(names):
        try:
            runs.append(store.sweep_run(name))
        except UserError as exc:
            problems += exc.lines
    if problems:
        raise UserError(*problems)
    return [load_sweep(store, run) for run in runs]


def load_sweep(store: SweepStore, run) -> SweepData:
    record = store.record(run=run)
    trials = store.trials(run=run)
    return SweepData(
        record=record,
        trials=trials,
        params=store.trial_params(trials, record),
        history=store.history(keys=(record.metric,), trials=trials),
        best_config_yaml=store.artifact_text(run, "best_config.yaml") if record.best_trial_id else None,
        forecast=store.sweep_history(run, LIVE_FORECAST_KEYS),
        front=study_front(run.data.tags[Tag.SWEEP_DIR], record.name) if Tag.SWEEP_DIR in run.data.tags else None,
    )
