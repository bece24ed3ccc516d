"""The one query layer over the MLflow store: sweeps, trials and metric histories as polars
frames. `sweep list`, `sweep status`, reports and promotion all read through here."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from sweeper.errors import UserError
from sweeper.plan import asha_rungs
from sweeper.tracking import check_tracking_uri, client_for

__all__ = ["SweepStore", "SweepRecord"]

TRIAL_COLUMNS = [
    "trial_number", "trial_id", "run_id", "state", "status", "run_status", "steps",
    "metric", "cost_usd", "wall_seconds", "setup_seconds", "tokens", "saved_usd", "params", "checkpoint_path",
    "started_ms", "ended_ms",
]


@dataclass(frozen=True)
class SweepRecord:
    """What a sweep's parent run says about it: identity, config, search space, ASHA rungs,
    totals and the reproducibility record (versions, data hashes, seeds)."""

    name: str
    run_id: str
    status: str
    metric: str
    goal: str
    max_steps: int
    started_ms: int
    ended_ms: int | None
    config: dict[str, str]  # the fixed config, dotted keys -> logged strings
    search_space: dict[str, dict]  # search.parameters as in the YAML
    rungs: list[int]  # ASHA rung steps (empty without ASHA)
    totals: dict[str, float]  # the parent's metrics: cost_usd_total, trials_*, best_<metric>, ...
    best_trial_id: str | None
    versions: dict[str, str]
    data_sha256: dict[str, str]
    seeds: dict[str, str]
    reproducibility: dict[str, str]  # git commit, config hash, hardware, accelerator, price, sweep dir

    @property
    def minimize(self) -> bool:
        return self.goal == "minimize"


class SweepStore:
    def __init__(self, uri: str):
        check_tracking_uri(uri)
        self.uri = uri
        self.client = client_for(uri)

    # ------------------------------------------------------------ sweeps

    def _sweep_runs(self, name: str | None = None) -> list:
        experiments = self.client.search_experiments()
        if not experiments:
            return []
        query = "tags.`sweeper.kind` = 'sweep'"
        if name:
            query += f" and tags.`sweeper.sweep_name` = '{name}'"
        return self.client.search_runs(
            [e.experiment_id for e in experiments], filter_string=query, order_by=["attributes.start_time DESC"]
        )

    def sweeps(self) -> pl.DataFrame:
        """One row per sweep (the latest run of each name)."""
        rows, seen = [], set()
        for run in self._sweep_runs():
            name = run.data.tags.get("sweeper.sweep_name")
            if name in seen:
                continue
            seen.add(name)
            metric = run.data.tags.get("sweeper.metric", "eval_loss")
            trials = self.trials(run=run) if run.info.status == "RUNNING" else None
            rows.append({
                "sweep": name,
                "status": run.data.tags.get("sweeper.status", run.info.status.lower()),
                "trials": int(run.data.metrics.get("trials_total", len(trials) if trials is not None else 0)),
                "metric": metric,
                "best": run.data.metrics.get(f"best_{metric}", _best_of(trials, run) if trials is not None else None),
                "cost_usd": run.data.metrics.get("cost_usd_total"),
                "started": run.info.start_time,
                "run_id": run.info.run_id,
            })
        return pl.DataFrame(rows, schema={
            "sweep": pl.String, "status": pl.String, "trials": pl.Int64, "metric": pl.String,
            "best": pl.Float64, "cost_usd": pl.Float64, "started": pl.Int64, "run_id": pl.String,
        })

    def sweep_run(self, name: str):
        """The latest parent run of sweep `name`; UserError listing the known names."""
        runs = self._sweep_runs(name)
        if not runs:
            known = sorted({r.data.tags.get("sweeper.sweep_name") for r in self._sweep_runs()})
            listing = ", ".join(known) if known else "none yet"
            raise UserError(f"NAME: no sweep named {name!r} in {self.uri}; known sweeps: {listing}")
        return runs[0]

    def sweep_spec(self, run):
        """The sweep's resolved config, from its parent run's sweep.yaml artifact."""
        from sweeper.spec import SweepSpec

        with tempfile.TemporaryDirectory(prefix="sweeper-spec-") as folder:
            path = self.client.download_artifacts(run.info.run_id, "sweep.yaml", folder)
            raw = yaml.safe_load(Path(path).read_text())
        return SweepSpec.model_validate(raw, context={"check_files": False})

    def trial_spec(self, run, trial: dict):
        """A trial's values as one full run (`trial`: a `trials()` row): what best_config.yaml
        holds for the best trial, for any trial."""
        from sweeper.spec import single_run_spec

        spec = self.sweep_spec(run)
        return single_run_spec(spec, json.loads(trial["params"]), name=f"{spec.name}-trial-{trial['trial_number']}")

    # ------------------------------------------------------------ trials

    def trials(self, name: str | None = None, run=None) -> pl.DataFrame:
        """One row per trial of a sweep, in start order."""
        run = run or self.sweep_run(name)
        metric = run.data.tags.get("sweeper.metric", "eval_loss")
        children = self.client.search_runs(
            [run.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'"
        )
        rows = []
        for child in children:
            tags, metrics = child.data.tags, child.data.metrics
            steps = metrics.get("steps_trained")
            if steps is None and metric in metrics:  # still running: the step of its latest report
                steps = max(p.step for p in self.client.get_metric_history(child.info.run_id, metric))
            rows.append({
                "trial_number": int(tags.get("sweeper.trial_number", 0)),
                "trial_id": tags.get("sweeper.trial_id"),
                "run_id": child.info.run_id,
                "state": tags.get("sweeper.state", "running"),
                "status": tags.get("sweeper.status", "running"),
                "run_status": child.info.status,
                "steps": int(steps) if steps is not None else None,
                "metric": metrics.get(metric),
                "cost_usd": metrics.get("cost_usd"),
                "wall_seconds": metrics.get("wall_seconds"),
                "setup_seconds": metrics.get("setup_seconds"),
                "tokens": metrics.get("tokens"),
                "saved_usd": metrics.get("cost_usd_saved_by_pruning"),
                "params": json.dumps(child.data.params),
                "checkpoint_path": tags.get("sweeper.checkpoint_path"),
                "started_ms": child.info.start_time,
                "ended_ms": child.info.end_time,
            })
        frame = pl.DataFrame(rows, schema={
            "trial_number": pl.Int64, "trial_id": pl.String, "run_id": pl.String, "state": pl.String,
            "status": pl.String, "run_status": pl.String, "steps": pl.Int64, "metric": pl.Float64,
            "cost_usd": pl.Float64, "wall_seconds": pl.Float64, "setup_seconds": pl.Float64,
            "tokens": pl.Float64, "saved_usd": pl.Float64, "params": pl.String, "checkpoint_path": pl.String,
            "started_ms": pl.Int64, "ended_ms": pl.Int64,
        })
        return frame.sort("trial_number")

    def trial(self, run, ref: str | None = None) -> dict:
        """One trial of sweep `run` as a `trials()` row: `ref` is its number (as in `sweep
        status`) or its Tune trial id; None means the sweep's best trial."""
        trials = self.trials(run=run)
        name = run.data.tags.get("sweeper.sweep_name")
        if ref is None:
            best_id = run.data.tags.get("sweeper.best_trial_id")
            if not best_id:
                raise UserError(
                    f"--trial: sweep {name!r} has no best trial (no trial completed, or it is still "
                    "running); name one with --trial NUMBER"
                )
            ref = best_id
        rows = matching_trials(trials, ref.strip())
        if not rows:
            known = ", ".join(f"{n} ({i})" for n, i in zip(trials["trial_number"], trials["trial_id"]))
            raise UserError(
                f"--trial: sweep {name!r} has no trial {ref!r}; give a trial number or id: {known or 'none yet'}"
            )
        return rows[0]

    def trial_params(self, trials: pl.DataFrame, record: SweepRecord) -> pl.DataFrame:
        """One row per trial: trial_number and one column per searched parameter (numbers as
        Float64 where every value is numeric, else the logged strings)."""
        names = list(record.search_space)
        rows = [{"trial_number": number, **{k: json.loads(params).get(k) for k in names}}
                for number, params in zip(trials["trial_number"], trials["params"])]
        frame = pl.DataFrame(rows, schema={"trial_number": pl.Int64, **{k: pl.String for k in names}})
        for name in names:
            as_number = frame[name].cast(pl.Float64, strict=False)
            if as_number.null_count() == frame[name].null_count():
                frame = frame.with_columns(as_number.alias(name))
        return frame

    def history(
        self, name: str | None = None, keys: tuple[str, ...] = ("eval_loss",), trials: pl.DataFrame | None = None
    ) -> pl.DataFrame:
        """Metric histories of every trial: trial_number, key, step, value."""
        trials = self.trials(name) if trials is None else trials
        rows = []
        for number, run_id in zip(trials["trial_number"], trials["run_id"]):
            for key in keys:
                for point in self.client.get_metric_history(run_id, key):
                    rows.append({"trial_number": number, "key": key, "step": point.step, "value": point.value})
        return pl.DataFrame(rows, schema={"trial_number": pl.Int64, "key": pl.String, "step": pl.Int64, "value": pl.Float64})

    # ------------------------------------------------------------ the sweep's own record

    def record(self, name: str | None = None, run=None) -> SweepRecord:
        """The parent run of sweep `name` as a SweepRecord."""
        run = run or self.sweep_run(name)
        tags, params = run.data.tags, run.data.params
        max_steps = int(params.get("training.max_steps", tags.get("sweeper.max_steps", 0)))
        rungs = []
        if params.get("early_stopping.scheduler") in ("asha", "asha_stopping"):
            rungs = asha_rungs(
                int(params["early_stopping.grace_period"]), max_steps, float(params["early_stopping.reduction_factor"])
            )
        reproducibility = {
            "git commit": tags.get("sweeper.git_commit", "not recorded (the sweep's YAML was not in a git checkout)"),
            "config hash": tags.get("sweeper.config_hash", "-"),
            "hardware": tags.get("sweeper.hardware", "-"),
            "accelerator": tags.get("sweeper.accelerator", "-"),
            "USD per accelerator-hour": tags.get("sweeper.usd_per_hour", "-"),
            "model": params.get("model.name_or_path", "-"),
            "sweep folder": tags.get("sweeper.sweep_dir", "-"),
            "MLflow run": run.info.run_id,
        }
        return SweepRecord(
            name=tags.get("sweeper.sweep_name", run.info.run_name),
            run_id=run.info.run_id,
            status=tags.get("sweeper.status", run.info.status.lower()),
            metric=tags.get("sweeper.metric", "eval_loss"),
            goal=tags.get("sweeper.goal", "minimize"),
            max_steps=max_steps,
            started_ms=run.info.start_time,
            ended_ms=run.info.end_time,
            config=dict(params),
            search_space=json.loads(tags.get("sweeper.search_space", "{}")),
            rungs=rungs,
            totals=dict(run.data.metrics),
            best_trial_id=tags.get("sweeper.best_trial_id"),
            versions=_prefixed(tags, "sweeper.versions."),
            data_sha256=_prefixed(tags, "sweeper.data_sha256."),
            seeds={key: params[key] for key in ("training.seed", "search.seed") if key in params},
            reproducibility=reproducibility,
        )

    def artifact_text(self, run_id: str, path: str) -> str | None:
        """A text artifact of a run (sweep.yaml, best_config.yaml), or None if it has none."""
        try:
            with tempfile.TemporaryDirectory() as folder:
                return Path(self.client.download_artifacts(run_id, path, folder)).read_text()
        except Exception:  # MLflow raises different errors per store for a missing artifact
            return None


def _prefixed(tags: dict[str, str], prefix: str) -> dict[str, str]:
    return {key.removeprefix(prefix): value for key, value in sorted(tags.items()) if key.startswith(prefix)}


def _best_of(trials: pl.DataFrame, run) -> float | None:
    values = trials.filter(pl.col("state") == "completed")["metric"].drop_nulls()
    if values.is_empty():
        return None
    return values.min() if run.data.tags.get("sweeper.goal", "minimize") == "minimize" else values.max()


def matching_trials(trials: pl.DataFrame, ref: str) -> list[dict]:
    """Rows of `trials` that `ref` names: a Tune trial id first, since one in about 40 of
    them is all digits (83639739), then a trial number."""
    rows = trials.filter(pl.col("trial_id") == ref).to_dicts()
    if not rows and ref.isdigit():
        rows = trials.filter(pl.col("trial_number") == int(ref)).to_dicts()
    return rows
