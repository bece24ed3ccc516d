"""MLflow tracking: one parent run per sweep, one nested child run per trial.

The only writer is the driver: a Tune callback logs what the trials report (results
reach the driver through Tune, wherever the trials run), so trials on other nodes need
no access to the store and the store sees one consistent writer.

Run layout (tags are the query keys used by `sweep list/status` and the reports):
- parent: tags sweeper.kind=sweep, sweeper.sweep_name, sweeper.config_hash,
  sweeper.git_commit, sweeper.versions.<pkg>, sweeper.data_sha256.<split>,
  sweeper.hardware; params = the fixed config (dotted keys); artifact sweep.yaml; at the
  end best_config.yaml, metrics best_<metric>, trials_*, cost_*; tag sweeper.best_trial_id.
- child: tags sweeper.kind=trial, sweeper.trial_id, sweeper.trial_number,
  sweeper.status (completed | pruned at step N | failed: reason); params = sampled values;
  metric histories by step; setup_seconds, cost_usd, accelerator_hours, tokens,
  usd_per_million_tokens, pauses (at rungs, ASHA by promotion); while paused, sweeper.state
  is paused. Run status FINISHED (completed), KILLED (pruned or stopped),
  FAILED (failed).
- promotion (written by sweeper/promote.py, not here): nested under a trial's run, tag
  sweeper.kind=promotion; it holds the logged model of a registered version.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ray.tune import Callback

from sweeper.cost import SweepCost, TrialCost, price_per_hour, pruning_saving, sweep_cost, trial_cost
from sweeper.errors import UserError
from sweeper.progress import SweepBook, TrialRecord
from sweeper.spec import SweepSpec, single_run_spec, spec_hash, spec_to_yaml

RUN_STATUS = {"completed": "FINISHED", "pruned": "KILLED", "failed": "FAILED", "stopped": "KILLED"}
VERSIONED_PACKAGES = ("torch", "transformers", "peft", "trl", "ray", "optuna", "mlflow")


def resolve_tracking_uri(uri: str | None, workdir: Path | None = None) -> str:
    """The YAML's tracking.uri, or the default SQLite store in the working directory."""
    if uri:
        return uri
    return f"sqlite:///{(workdir or Path.cwd()).resolve() / 'mlflow.db'}"


def default_artifact_location(uri: str, workdir: Path | None = None) -> str | None:
    """Artifacts beside a local SQLite store; a server decides its own."""
    if uri.startswith("sqlite:"):
        return ((workdir or Path.cwd()).resolve() / "mlartifacts").as_uri()
    return None


def check_tracking_uri(uri: str) -> None:
    """Fail fast, before any trial starts, if the store cannot be reached."""
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
                if response.status != 200:
                    raise OSError(f"HTTP {response.status}")
        except (OSError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(
                f"tracking.uri: cannot reach MLflow at {uri} ({reason}); start the server "
                "(mlflow server --backend-store-uri sqlite:///mlflow.db) or fix the URI"
            ) from None
    elif uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise UserError(f"tracking.uri: folder {folder} of the SQLite store does not exist; create it or fix the URI")
    elif uri.startswith("file:") or "://" not in uri:
        raise UserError(
            f"tracking.uri: {uri!r} is a file store, which has no Model Registry; use sqlite:///path/mlflow.db "
            "or an http:// MLflow server"
        )


def client_for(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def ensure_experiment(client, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


def flat_params(spec: SweepSpec) -> dict[str, str]:
    """The fixed config as dotted keys (the search section is logged as JSON)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and prefix != "search.parameters":
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat[prefix] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    walk("", spec.model_dump(mode="json"))
    return {k: v[:6000] for k, v in flat.items()}


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def git_commit(folder: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


class MlflowTracker(Callback):
    """Tune callback on the driver: the single writer of the sweep's MLflow runs."""

    def __init__(self, spec: SweepSpec, book: SweepBook, uri: str, hardware: str, trial_resources):
        self.spec, self.book, self.uri = spec, book, uri
        self.hardware = hardware
        # GPUs of a whole trial, or its CPU cores when it uses no GPU.
        self.accelerators_per_trial = trial_resources.gpus or trial_resources.cpus
        self.usd_per_hour = price_per_hour(
            spec.cost.resolved_accelerator(spec.resources.use_gpu), spec.cost.usd_per_hour, spec.cost.prices
        )
        self.client = client_for(uri)
        self.experiment_id = ensure_experiment(self.client, spec.tracking.experiment, default_artifact_location(uri))
        self.parent_run_id: str | None = None
        self.child_run_ids: dict[str, str] = {}
        self.trial_costs: dict[str, TrialCost] = {}
        self.savings: dict[str, float] = {}
        self.tagged_paused: set[str] = set()

    def __getstate__(self) -> dict:
        # Tune pickles callbacks with its experiment state; the client is runtime-only.
        return {**self.__dict__, "client": None}

    # ------------------------------------------------------------ the sweep (parent run)

    def start_sweep(self, yaml_folder: Path) -> str:
        from mlflow.entities import Param, RunTag

        spec = self.spec
        tags = {
            "sweeper.kind": "sweep",
            "sweeper.sweep_name": spec.name,
            "sweeper.config_hash": spec_hash(spec),
            "sweeper.task": spec.task,
            "sweeper.metric": spec.search.metric,
            "sweeper.goal": spec.search.goal,
            "sweeper.max_steps": str(spec.training.max_steps),
            "sweeper.sweep_dir": str(spec.sweep_dir),
            "sweeper.hardware": self.hardware,
            "sweeper.accelerator": spec.cost.resolved_accelerator(spec.resources.use_gpu),
            "sweeper.usd_per_hour": str(self.usd_per_hour),
            "sweeper.search_space": json.dumps(spec.model_dump(mode="json")["search"]["parameters"]),
            **{f"sweeper.versions.{k}": v for k, v in package_versions().items()},
            **{f"sweeper.data_sha256.{split}": sha for split, sha in self._data_hashes().items()},
        }
        commit = git_commit(yaml_folder)
        if commit:
            tags["sweeper.git_commit"] = commit
        run = self.client.create_run(self.experiment_id, run_name=spec.name, tags=tags)
        self.parent_run_id = run.info.run_id
        params = [Param(k, v) for k, v in flat_params(spec).items()]
        for start in range(0, len(params), 100):
            self.client.log_batch(self.parent_run_id, params=params[start : start + 100])
        self.client.log_text(self.parent_run_id, spec_to_yaml(spec), "sweep.yaml")
        self.client.log_batch(self.parent_run_id, tags=[RunTag("sweeper.status", "running")])
        return self.parent_run_id

    def reattach(self) -> None:
        """For `sweep resume`: reuse the sweep's parent run and its trials' child runs
        (no duplicates), and rebuild the book of trials from them."""
        from mlflow.entities import RunTag

        query = f"tags.`sweeper.kind` = 'sweep' and tags.`sweeper.sweep_name` = '{self.spec.name}'"
        parents = [
            run
            for run in self.client.search_runs([self.experiment_id], query, order_by=["attributes.start_time DESC"])
            if run.data.tags.get("sweeper.sweep_dir") == str(self.spec.sweep_dir)
        ]
        if not parents:
            raise UserError(
                f"NAME: no MLflow run of sweep {self.spec.name!r} in {self.uri} (experiment "
                f"{self.spec.tracking.experiment!r}); cannot resume it"
            )
        parent = parents[0]
        self.parent_run_id = parent.info.run_id
        self.book.started_at = parent.info.start_time / 1000
        children = self.client.search_runs(
            [self.experiment_id], f"tags.`mlflow.parentRunId` = '{self.parent_run_id}'"
        )
        for child in sorted(children, key=lambda r: int(r.data.tags.get("sweeper.trial_number", 0))):
            record = self._record_from_run(child)
            self.book.trials[record.trial_id] = record
            self.child_run_ids[record.trial_id] = child.info.run_id
            if record.finished:
                metrics = child.data.metrics
                self.trial_costs[record.trial_id] = TrialCost(
                    metrics.get("accelerator_hours", 0.0), metrics.get("cost_usd", 0.0), metrics.get("tokens", 0.0)
                )
                self.savings[record.trial_id] = metrics.get("cost_usd_saved_by_pruning", 0.0)
        self.client.update_run(self.parent_run_id, status="RUNNING")
        self.client.log_batch(self.parent_run_id, tags=[RunTag("sweeper.status", "running")])

    def _record_from_run(self, run) -> TrialRecord:
        from sweeper.progress import REPORTED_KEYS

        tags, metrics = run.data.tags, run.data.metrics
        by_step: dict[int, dict] = {}
        for key in REPORTED_KEYS:
            if key in ("step", "setup_seconds"):
                continue
            for point in self.client.get_metric_history(run.info.run_id, key):
                by_step.setdefault(point.step, {"step": point.step})[key] = point.value
        history = [by_step[step] for step in sorted(by_step)]
        if history and "setup_seconds" in metrics:
            history[0]["setup_seconds"] = metrics["setup_seconds"]
        state = tags.get("sweeper.state", "running")
        last_seen = max((p.timestamp for p in self.client.get_metric_history(run.info.run_id, self.book.metric)), default=run.info.start_time)
        wall = metrics.get("wall_seconds", (last_seen - run.info.start_time) / 1000)
        record = TrialRecord(
            trial_id=tags["sweeper.trial_id"],
            number=int(tags["sweeper.trial_number"]),
            params=dict(run.data.params),
            status=state if state in ("completed", "pruned", "failed") else "stopped",
            history=history,
            started_at=time.time(),
            ended_at=time.time(),
            checkpoint_path=tags.get("sweeper.checkpoint_path"),
            prior_wall_seconds=wall,
            pauses=int(metrics.get("pauses", 0)),
        )
        if record.status == "failed":
            record.error = tags.get("sweeper.status", "failed").removeprefix("failed: ")
        return record

    def _data_hashes(self) -> dict[str, str]:
        from trainables.data import file_sha256

        return {"train": file_sha256(self.spec.data.train), "eval": file_sha256(self.spec.data.eval)}

    def discard_trials(self, records: list) -> None:
        """Forget trials that will never run (BookKeeper.lost_trials): their child runs are
        deleted (MLflow keeps deleted runs restorable until `mlflow gc`) and they leave
        the book, so the sweep's counts and costs are those of the trials Tune ran."""
        for record in records:
            run_id = self.child_run_ids.pop(record.trial_id, None)
            if run_id is not None:
                self.client.set_terminated(run_id, status="KILLED")
                self.client.delete_run(run_id)
            self.book.trials.pop(record.trial_id, None)

    def finish_sweep(self, interrupted: bool = False) -> SweepCost:
        """Close every open run, then write the sweep's totals, best config and status."""
        from mlflow.entities import Metric, RunTag

        for record in self.book.trials.values():
            if record.trial_id in self.child_run_ids and record.trial_id not in self.trial_costs:
                if not record.finished:
                    record.status, record.ended_at = "stopped", time.time()
                self._end_trial(record)
        totals = sweep_cost(list(self.trial_costs.values()), list(self.savings.values()))
        now = int(time.time() * 1000)
        metrics = {
            "trials_completed": self.book.count("completed"),
            "trials_pruned": self.book.count("pruned"),
            "trials_failed": self.book.count("failed"),
            "trials_total": len(self.book.trials),
            "cost_usd_total": totals.usd,
            "cost_usd_saved_by_pruning": totals.saved_by_pruning_usd,
            "accelerator_hours_total": totals.accelerator_hours,
            "tokens_total": totals.tokens,
            "wall_seconds": time.time() - self.book.started_at,
        }
        if totals.usd_per_million_tokens is not None:
            metrics["usd_per_million_tokens"] = totals.usd_per_million_tokens
        tags = []
        best = self.book.best()
        if best:
            metrics[f"best_{self.book.metric}"] = best.last(self.book.metric)
            tags += [
                RunTag("sweeper.best_trial_id", best.trial_id),
                RunTag("sweeper.best_run_id", self.child_run_ids.get(best.trial_id, "")),
            ]
            config = single_run_spec(self.spec, best.params, name=f"{self.spec.name}-best")
            self.client.log_text(self.parent_run_id, spec_to_yaml(config), "best_config.yaml")
        status = "stopped" if interrupted else ("finished" if best else "failed")
        tags.append(RunTag("sweeper.status", status))
        self.client.log_batch(
            self.parent_run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()], tags=tags
        )
        run_status = "KILLED" if interrupted else ("FINISHED" if best else "FAILED")
        self.client.set_terminated(self.parent_run_id, status=run_status)
        return totals

    # ------------------------------------------------------------ trials (child runs)

    def on_trial_start(self, iteration, trials, trial, **info):
        from mlflow.entities import Param

        record = self.book.trials[trial.trial_id]
        if trial.trial_id in self.child_run_ids:  # continued after `sweep resume`: same run
            from mlflow.entities import RunTag

            if record.finished:
                return

            run_id = self.child_run_ids[trial.trial_id]
            self.trial_costs.pop(trial.trial_id, None)
            self.client.update_run(run_id, status="RUNNING")
            self.client.log_batch(run_id, tags=[RunTag("sweeper.status", "running"), RunTag("sweeper.state", "running")])
            return
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"{self.spec.name}-trial-{record.number}",
            tags={
                "mlflow.parentRunId": self.parent_run_id,
                "sweeper.kind": "trial",
                "sweeper.sweep_name": self.spec.name,
                "sweeper.trial_id": trial.trial_id,
                "sweeper.trial_number": str(record.number),
                "sweeper.status": "running",
            },
        )
        self.child_run_ids[trial.trial_id] = run.info.run_id
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in record.params.items()])

    def on_step_begin(self, iteration, trials, **info):
        """A trial paused at a rung (ASHA by promotion; the BookKeeper, called before this,
        marked it) is tagged so, for `sweep status` while the sweep runs."""
        from mlflow.entities import Metric, RunTag

        for record in self.book.trials.values():
            run_id = self.child_run_ids.get(record.trial_id)
            if record.status == "paused" and run_id and record.trial_id not in self.tagged_paused:
                self.tagged_paused.add(record.trial_id)
                self.client.log_batch(
                    run_id,
                    metrics=[Metric("pauses", record.pauses, int(time.time() * 1000), record.step)],
                    tags=[RunTag("sweeper.status", record.status_text), RunTag("sweeper.state", "paused")],
                )
            elif record.status != "paused":
                self.tagged_paused.discard(record.trial_id)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from mlflow.entities import Metric

        run_id = self.child_run_ids.get(trial.trial_id)
        record = self.book.trials[trial.trial_id]
        if run_id is None or not record.history:
            return
        report = record.history[-1]
        now = int(time.time() * 1000)
        step = int(report.get("step", 0))
        metrics = [
            Metric(key, float(value), now, step)
            for key, value in report.items()
            if key not in ("step", "setup_seconds") and isinstance(value, (int, float))
        ]
        self.client.log_batch(run_id, metrics=metrics)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end_trial(self.book.trials[trial.trial_id])

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end_trial(self.book.trials[trial.trial_id])

    def _end_trial(self, record: TrialRecord) -> None:
        from mlflow.entities import Metric, RunTag

        run_id = self.child_run_ids.get(record.trial_id)
        if run_id is None or record.trial_id in self.trial_costs:
            return
        wall = record.wall_seconds
        cost = trial_cost(wall, self.accelerators_per_trial, self.usd_per_hour, record.train_tokens)
        setup = record.setup_seconds or 0.0
        saving = (
            pruning_saving(wall, setup, record.step, self.book.max_steps, self.accelerators_per_trial, self.usd_per_hour)
            if record.status == "pruned"
            else 0.0
        )
        self.trial_costs[record.trial_id] = cost
        self.savings[record.trial_id] = saving
        now = int(time.time() * 1000)
        values = {
            "cost_usd": cost.usd,
            "accelerator_hours": cost.accelerator_hours,
            "tokens": cost.tokens,
            "wall_seconds": wall,
            "steps_trained": record.step,
            "cost_usd_saved_by_pruning": saving,
            "pauses": record.pauses,
        }
        if record.setup_seconds is not None:
            values["setup_seconds"] = record.setup_seconds
        if cost.usd_per_million_tokens is not None:
            values["usd_per_million_tokens"] = cost.usd_per_million_tokens
        final = record.last(self.book.metric)
        if final is not None:
            values[f"final_{self.book.metric}"] = final
        tags = [RunTag("sweeper.status", record.status_text), RunTag("sweeper.state", record.status)]
        if record.checkpoint_path:
            tags.append(RunTag("sweeper.checkpoint_path", record.checkpoint_path))
        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), now, record.step) for k, v in values.items()], tags=tags
        )
        self.client.set_terminated(run_id, status=RUN_STATUS[record.status])


def hardware_description(cluster) -> str:
    return (
        f"{platform.machine()} {platform.system()}; cluster {cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs; "
        f"driver python {platform.python_version()}"
    )
