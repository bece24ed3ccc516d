"""The one query layer over the MLflow store: sweeps, trials and metric histories as polars
frames. `sweep list`, `sweep status`, reports and promotion all read through here.

Imports neither Ray nor torch (a unit test holds it to that), and MLflow only when a
command reads a store, through MLflow's public `MlflowClient`; a local SQLite store that
does not exist yet is read as empty, never created."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import unquote, urlparse

import polars as pl

from sweeper.track._book import best_of
from sweeper.errors import UserError
from sweeper.track._mlflow_store import check_tracking_uri, client_for, sqlite_file
from sweeper.names import RunKind, RunMetric, Tag, TrialState
from trainables.metrics import EVAL_LOSS, SETUP_SECONDS

__all__ = ["SweepStore", "SweepRecord", "best_trial_row", "matching_trials"]

PAGE = 1000  # MLflow's largest search page


@dataclass(frozen=True)
class SweepRecord:
    """What a sweep's parent run says about it: identity, config, search space, ASHA rungs,
    totals and the reproducibility record (versions, data hashes, seeds)."""

    name: str
    run_id: str
    status: str  # a SweepStatus; MLflow's run status, lower case, where the tag is missing
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
    """Read-only queries over the MLflow store at `uri` (checked on construction: a
    UserError if it cannot be reached)."""

    def __init__(self, uri: str):
        check_tracking_uri(uri)
        self.uri = uri
        # A local SQLite store whose file does not exist holds no runs: a read never creates
        # it (MLflow's client would, schema and all, wherever `sweep list` was typed).
        database = sqlite_file(uri)
        self.exists = database is None or database.exists()

    @cached_property
    def client(self):
        return client_for(self.uri)

    def find_runs(
        self, tags: dict[str, str], experiment_ids: list[str] | None = None, newest_first: bool = False
    ) -> list:
        """Active runs (of active experiments) whose tags hold every `tags` item, as MLflow's
        `Run` (`info.run_id`, `info.status`, ..., `data.tags`, `data.params`, `data.metrics`)."""
        if not self.exists:
            return []
        if experiment_ids is None:
            experiment_ids = [e.experiment_id for e in self.client.search_experiments()]
        if not experiment_ids:
            return []
        query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())
        order_by = ["attributes.start_time DESC"] if newest_first else None
        runs, token = [], None
        while True:
            page = self.client.search_runs(
                experiment_ids, filter_string=query, order_by=order_by, max_results=PAGE, page_token=token
            )
            runs += page
            token = page.token
            if not token:
                return runs

    def metric_histories(self, run_ids: list[str], key: str) -> dict[str, list]:
        """Every logged value of metric `key` per run (points with step, value, timestamp)."""
        if not self.exists:
            return {}
        return {run_id: self.client.get_metric_history(run_id, key) for run_id in run_ids}

    # ------------------------------------------------------------ sweeps

    def _sweep_runs(self, name: str | None = None) -> list:
        tags = {Tag.KIND: RunKind.SWEEP, **({Tag.SWEEP_NAME: name} if name else {})}
        return self.find_runs(tags, newest_first=True)

    def sweeps(self) -> pl.DataFrame:
        """One row per sweep (the latest run of each name)."""
        rows, seen = [], set()
        for run in self._sweep_runs():
            tags, metrics = run.data.tags, run.data.metrics
            name = tags.get(Tag.SWEEP_NAME)
            if name in seen:
                continue
            seen.add(name)
            metric = tags.get(Tag.METRIC, EVAL_LOSS)
            # A running sweep has no totals yet: count and rank its trials as they stand.
            trials = self.trials(run=run) if run.info.status == "RUNNING" else None
            rows.append({
                "sweep": name,
                "status": tags.get(Tag.STATUS, run.info.status.lower()),
                "trials": int(metrics.get(RunMetric.TRIALS_TOTAL, len(trials) if trials is not None else 0)),
                "metric": metric,
                "best": metrics.get(RunMetric.best(metric), _best_value(trials, run) if trials is not None else None),
                "cost_usd": metrics.get(RunMetric.COST_USD_TOTAL),
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
            known = sorted({r.data.tags.get(Tag.SWEEP_NAME) for r in self._sweep_runs()})
            listing = ", ".join(known) if known else "none yet"
            raise UserError(f"NAME: no sweep named {name!r} in {self.uri}; known sweeps: {listing}")
        return runs[0]

    def sweep_spec(self, run):
        """The sweep's resolved config, from its parent run's sweep.yaml artifact."""
        from sweeper.spec import parse_yaml, revalidate_spec

        raw = parse_yaml(self._artifact(run, "sweep.yaml"), "sweep.yaml")
        return revalidate_spec(raw, f"the sweep.yaml stored with MLflow run {run.info.run_id}")

    def _artifact(self, run, path: str) -> str:
        """A text artifact of `run`: read in place from a local artifact folder, else
        downloaded by the client."""
        root = run.info.artifact_uri or ""
        if root.startswith("file:"):
            local = Path(unquote(urlparse(root).path)) / path
            if local.is_file():
                return local.read_text()
        with tempfile.TemporaryDirectory(prefix="sweeper-artifact-") as folder:
            return Path(self.client.download_artifacts(run.info.run_id, path, folder)).read_text()

    def trial_spec(self, run, trial: dict):
        """A trial's values as one full run (`trial`: a `trials()` row): what best_config.yaml
        holds for the best trial, for any trial."""
        from sweeper.spec import single_run_spec

        spec = self.sweep_spec(run)
        return single_run_spec(spec, json.loads(trial["params"]), name=f"{spec.name}-trial-{trial['trial_number']}")

    # ------------------------------------------------------------ trials

    def trials(self, name: str | None = None, run=None) -> pl.DataFrame:
        """One row per trial of a sweep, in start order. `state` holds a TrialState value,
        `status` its words (`pruned at step 10`); `metric` the trial's last value of the
        sweep's metric; `pauses` how often it waited at a rung (ASHA by promotion); `warm_start` the
        earlier sweep's trial that gave its config ("<sweep>/<trial id>"), else null;
        `startup_trial` whether it was one of the sweep's startup trials (trained to the end
        unranked)."""
        run = run or self.sweep_run(name)
        metric = run.data.tags.get(Tag.METRIC, EVAL_LOSS)
        children = self.find_runs({Tag.PARENT_RUN_ID: run.info.run_id}, [run.info.experiment_id])
        # Still running: a trial's steps are those of its latest report.
        running = [c.info.run_id for c in children if RunMetric.STEPS_TRAINED not in c.data.metrics]
        histories = self.metric_histories(running, metric) if running else {}
        rows = []
        for child in children:
            tags, metrics = child.data.tags, child.data.metrics
            steps = metrics.get(RunMetric.STEPS_TRAINED)
            if steps is None and histories.get(child.info.run_id):
                steps = max(p.step for p in histories[child.info.run_id])
            rows.append({
                "trial_number": int(tags.get(Tag.TRIAL_NUMBER, 0)),
                "trial_id": tags.get(Tag.TRIAL_ID),
                "run_id": child.info.run_id,
                "state": tags.get(Tag.STATE, TrialState.RUNNING),
                "status": tags.get(Tag.STATUS, TrialState.RUNNING),
                "run_status": child.info.status,
                "steps": int(steps) if steps is not None else None,
                "metric": metrics.get(metric),
                "cost_usd": metrics.get(RunMetric.COST_USD),
                "wall_seconds": metrics.get(RunMetric.WALL_SECONDS),
                "setup_seconds": metrics.get(SETUP_SECONDS),
                "tokens": metrics.get(RunMetric.TOKENS),
                "saved_usd": metrics.get(RunMetric.SAVED_BY_PRUNING_USD),
                "pauses": int(metrics.get(RunMetric.PAUSES, 0)),
                "params": json.dumps(child.data.params),
                "checkpoint_path": tags.get(Tag.CHECKPOINT_PATH),
                "warm_start": tags.get(Tag.WARM_START),
                "startup_trial": tags.get(Tag.STARTUP_TRIAL) == "true",
                "confirms": int(tags[Tag.CONFIRMS]) if Tag.CONFIRMS in tags else None,
                "started_ms": child.info.start_time,
                "ended_ms": child.info.end_time,
            })
        frame = pl.DataFrame(rows, schema={
            "trial_number": pl.Int64, "trial_id": pl.String, "run_id": pl.String, "state": pl.String,
            "status": pl.String, "run_status": pl.String, "steps": pl.Int64, "metric": pl.Float64,
            "cost_usd": pl.Float64, "wall_seconds": pl.Float64, "setup_seconds": pl.Float64,
            "tokens": pl.Float64, "saved_usd": pl.Float64, "pauses": pl.Int64, "params": pl.String,
            "checkpoint_path": pl.String, "warm_start": pl.String, "startup_trial": pl.Boolean,
            "confirms": pl.Int64, "started_ms": pl.Int64, "ended_ms": pl.Int64,
        })
        return frame.sort("trial_number")

    def trial(self, run, ref: str | None = None) -> dict:
        """One trial of sweep `run` as a `trials()` row: `ref` is its number (as in `sweep
        status`) or its Tune trial id; None means the sweep's best trial."""
        trials = self.trials(run=run)
        name = run.data.tags.get(Tag.SWEEP_NAME)
        if ref is None:
            best_id = run.data.tags.get(Tag.BEST_TRIAL_ID)
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
        self, name: str | None = None, keys: tuple[str, ...] = (EVAL_LOSS,), trials: pl.DataFrame | None = None
    ) -> pl.DataFrame:
        """Metric histories of every trial: trial_number, key, step, value."""
        trials = self.trials(name) if trials is None else trials
        numbers = dict(zip(trials["run_id"], trials["trial_number"]))
        rows = []
        for key in keys:
            for run_id, points in self.metric_histories(list(numbers), key).items():
                for point in points:
                    rows.append({"trial_number": numbers[run_id], "key": key, "step": point.step, "value": point.value})
        return pl.DataFrame(rows, schema={"trial_number": pl.Int64, "key": pl.String, "step": pl.Int64, "value": pl.Float64})

    def sweep_history(self, run, keys: tuple[str, ...]) -> pl.DataFrame:
        """Metric histories of the sweep's parent run `run` (the live forecast): one row per
        step, one column per key (null where a key has no value at that step)."""
        columns: dict[int, dict[str, float]] = {}
        for key in keys:
            for point in self.metric_histories([run.info.run_id], key).get(run.info.run_id, []):
                columns.setdefault(point.step, {})[key] = point.value
        rows = [{"step": step, **{key: values.get(key) for key in keys}} for step, values in sorted(columns.items())]
        return pl.DataFrame(rows, schema={"step": pl.Int64, **{key: pl.Float64 for key in keys}})

    # ------------------------------------------------------------ the sweep's own record

    def record(self, name: str | None = None, run=None) -> SweepRecord:
        """The parent run of sweep `name` as a SweepRecord."""
        from sweeper.plan import asha_rungs

        run = run or self.sweep_run(name)
        tags, params = run.data.tags, run.data.params
        max_steps = int(params.get("training.max_steps", tags.get(Tag.MAX_STEPS, 0)))
        rungs = []
        if params.get("early_stopping.scheduler") in ("asha", "asha_stopping"):
            # Without early_stopping.rung_spacing, the rungs are spaced by reduction_factor.
            spacing = params.get("early_stopping.rung_spacing", params["early_stopping.reduction_factor"])
            count = params.get("early_stopping.rungs", "")  # a number, or every rung below max_steps
            rungs = asha_rungs(
                int(params["early_stopping.grace_period"]), max_steps, float(spacing), int(count) if count.isdigit() else None
            )
        reproducibility = {
            "git commit": tags.get(Tag.GIT_COMMIT, "not recorded (the sweep's YAML was not in a git checkout)"),
            "config hash": tags.get(Tag.CONFIG_HASH, "-"),
            "hardware": tags.get(Tag.HARDWARE, "-"),
            "accelerator": tags.get(Tag.ACCELERATOR, "-"),
            "USD per accelerator-hour": tags.get(Tag.USD_PER_HOUR, "-"),
            "model": params.get("model.name_or_path", "-"),
            "sweep folder": tags.get(Tag.SWEEP_DIR, "-"),
            "MLflow run": run.info.run_id,
        }
        return SweepRecord(
            name=tags.get(Tag.SWEEP_NAME, run.info.run_name),
            run_id=run.info.run_id,
            status=tags.get(Tag.STATUS, run.info.status.lower()),
            metric=tags.get(Tag.METRIC, EVAL_LOSS),
            goal=tags.get(Tag.GOAL, "minimize"),
            max_steps=max_steps,
            started_ms=run.info.start_time,
            ended_ms=run.info.end_time,
            config=dict(params),
            search_space=json.loads(tags.get(Tag.SEARCH_SPACE, "{}")),
            rungs=rungs,
            totals=dict(run.data.metrics),
            best_trial_id=tags.get(Tag.BEST_TRIAL_ID),
            versions=_prefixed(tags, Tag.VERSIONS_PREFIX),
            data_sha256=_prefixed(tags, Tag.DATA_SHA256_PREFIX),
            seeds={key: params[key] for key in ("training.seed", "search.seed") if key in params},
            reproducibility=reproducibility,
        )

    def artifact_text(self, run, path: str) -> str | None:
        """A text artifact of `run` (sweep.yaml, best_config.yaml), or None if it has none."""
        try:
            return self._artifact(run, path)
        except Exception:  # MLflow raises different errors per store for a missing artifact
            return None


def _prefixed(tags: dict[str, str], prefix: str) -> dict[str, str]:
    return {key.removeprefix(prefix): value for key, value in sorted(tags.items()) if key.startswith(prefix)}


def best_trial_row(trials: pl.DataFrame, goal: str) -> dict | None:
    """The best completed trial of a `trials()` frame (`book.best_of`), or None."""
    completed = trials.filter(pl.col("state") == TrialState.COMPLETED)
    if "confirms" in completed.columns:  # search.confirm's reruns are no search trial
        completed = completed.filter(pl.col("confirms").is_null())
    completed = completed.to_dicts()
    return best_of(completed, lambda row: row["metric"], goal)


def _best_value(trials: pl.DataFrame, run) -> float | None:
    best = best_trial_row(trials, run.data.tags.get(Tag.GOAL, "minimize"))
    return best["metric"] if best else None


def matching_trials(trials: pl.DataFrame, ref: str) -> list[dict]:
    """Rows of `trials` that `ref` names: a Tune trial id first, since one in about 40 of
    them is all digits (83639739), then a trial number."""
    rows = trials.filter(pl.col("trial_id") == ref).to_dicts()
    if not rows and ref.isdigit():
        rows = trials.filter(pl.col("trial_number") == int(ref)).to_dicts()
    return rows
