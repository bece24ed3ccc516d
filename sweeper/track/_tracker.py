"""MLflow tracking: one parent run per sweep, one nested child run per trial.

The only writer is the driver: its Tune callback (sweeper/run/_driver.py) has this module log
what the trials report (results reach the driver through Tune, wherever the trials run), so
trials on other nodes need no access to the store and the store sees one writer.

Parent run: tags (sweeper.kind=sweep, name, config hash, git commit, versions, data hashes,
hardware, sweeper.status), the fixed config as params, sweep.yaml; at the end
best_config.yaml, best_<metric>, trial counts and costs, sweeper.best_trial_id. Child run:
tags (sweeper.kind=trial, trial id and number, sweeper.state, sweeper.status in words),
the sampled values as params, metric histories by step, and when it ends its cost, wall
time and steps; run status FINISHED (completed), KILLED (pruned or stopped), FAILED.
Tag and metric names are in `sweeper.names`; docs/concepts/tracking.md has the whole layout.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag

from sweeper.track._book import SweepBook, TrialRecord
from sweeper.cost import SweepCost, TrialCost, pruning_saving, sweep_cost, sweep_rate
from sweeper.errors import UserError
from sweeper.track._mlflow_store import RUN_STATUS, client_for, default_artifact_location, ensure_experiment
from sweeper.track._mlflow_store import flat_params, git_commit, package_versions
from sweeper.names import RunKind, RunMetric, SweepStatus, Tag, TrialState
from sweeper.spec import SweepSpec, picked_by, single_run_spec, spec_hash, spec_to_yaml
from trainables.metrics import GENERATED_ANSWERS, OUT_OF_MEMORY_AT_MICRO_BATCH, REPORTED_KEYS, SETUP_SECONDS, STEP, is_reported

# The experiment tag MLflow 3's UI reads to pick an experiment's landing page: without it
# the UI opens on the GenAI overview (traces), with this on the training runs.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


class MlflowTracker:
    """The single writer of the sweep's MLflow runs: a listener of the driver callback
    (sweeper/run/_driver.py), told of each trial's events once the book holds them."""

    def __init__(self, spec: SweepSpec, book: SweepBook, uri: str, hardware: str):
        self.spec, self.book, self.uri = spec, book, uri
        self.hardware = hardware
        self.rate = sweep_rate(spec)  # what a trial's second costs
        self.client = client_for(uri)
        if uri.startswith(("http://", "https://")):  # a server that can be away (sweeper/track/_backlog.py)
            from sweeper.track._backlog import BACKLOG_FILE, SHORT_RETRIES, DeferringClient

            for key, value in SHORT_RETRIES.items():
                os.environ.setdefault(key, value)
            self.client = DeferringClient(self.client, spec.sweep_dir / BACKLOG_FILE)
        # Set when the server stayed away past tracking.away_limit_s: the line the sweep stopped with.
        self.gave_up: str | None = None
        self.experiment_id = ensure_experiment(self.client, spec.tracking.experiment, default_artifact_location(uri))
        self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        self.parent_run_id: str | None = None
        self.child_run_ids: dict[str, str] = {}
        self.trial_costs: dict[str, TrialCost] = {}
        self.savings: dict[str, float] = {}

    def __getstate__(self) -> dict:
        # Tune pickles callbacks with its experiment state; the client is runtime-only.
        return {**self.__dict__, "client": None}

    # ------------------------------------------------------------ the sweep (parent run)

    def start_sweep(self, yaml_folder: Path) -> str:
        spec = self.spec
        tags = {
            Tag.KIND: RunKind.SWEEP,
            Tag.SWEEP_NAME: spec.name,
            Tag.CONFIG_HASH: spec_hash(spec),
            Tag.TASK: spec.task,
            Tag.METRIC: spec.search.metric,
            Tag.GOAL: spec.search.goal,
            Tag.MAX_STEPS: str(spec.training.max_steps),
            Tag.SWEEP_DIR: str(spec.sweep_dir),
            Tag.STORAGE_URI: spec.storage_uri,
            Tag.HARDWARE: self.hardware,
            Tag.ACCELERATOR: spec.cost.resolved_accelerator(spec.resources.use_gpu),
            Tag.USD_PER_HOUR: str(self.rate.usd_per_hour),
            Tag.SEARCH_SPACE: json.dumps(spec.model_dump(mode="json")["search"]["parameters"]),
            **{f"{Tag.VERSIONS_PREFIX}{k}": v for k, v in package_versions().items()},
            **{f"{Tag.DATA_SHA256_PREFIX}{split}": sha for split, sha in self._data_hashes().items()},
        }
        commit = git_commit(yaml_folder)
        if commit:
            tags[Tag.GIT_COMMIT] = commit
        run = self.client.create_run(self.experiment_id, run_name=spec.name, tags=tags)
        self.parent_run_id = run.info.run_id
        params = [Param(k, v) for k, v in flat_params(spec).items()]
        for start in range(0, len(params), 100):
            self.client.log_batch(self.parent_run_id, params=params[start : start + 100])
        self.client.log_text(self.parent_run_id, spec_to_yaml(spec), "sweep.yaml")
        self._mark_running()
        return self.parent_run_id

    def log_sweep_params(self, params: dict[str, str]) -> None:
        """More params on the parent run (the forecast, when the sweep starts)."""
        self.client.log_batch(self.parent_run_id, params=[Param(k, v) for k, v in params.items()])

    def log_sweep_figures(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        """More metrics and tags on the parent run (forecast and budget, when the sweep ends)."""
        now = int(time.time() * 1000)
        self.client.log_batch(
            self.parent_run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )

    def log_sweep_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Metrics on the parent run at `step` while the sweep runs (the live forecast)."""
        now = int(time.time() * 1000)
        self.client.log_batch(self.parent_run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def _mark_running(self) -> None:
        """The parent run says the sweep runs, and from which folder (a resume may be in another)."""
        tags = [RunTag(Tag.STATUS, SweepStatus.RUNNING), RunTag(Tag.SWEEP_DIR, str(self.spec.sweep_dir))]
        self.client.log_batch(self.parent_run_id, tags=tags)

    def reattach(self) -> None:
        """For `sweep resume`: reuse the sweep's parent run and its trials' child runs
        (no duplicates), and rebuild the book of trials from them. Once: a second call
        keeps what the first found."""
        if self.parent_run_id is not None:
            return
        from sweeper.track._backlog import BACKLOG_FILE, replay_backlog

        # What an earlier driver could not log (its server away) first: the runs are then whole.
        replay_backlog(getattr(self.client, "client", self.client), self.spec.sweep_dir / BACKLOG_FILE)
        query = f"tags.`{Tag.KIND}` = '{RunKind.SWEEP}' and tags.`{Tag.SWEEP_NAME}` = '{self.spec.name}'"
        # The sweep is the one whose Tune state is resumed: its storage, wherever its folder
        # is now (`sweep resume --storage` from another one); a run without the storage tag
        # names only its folder, which is then its storage.
        parents = [
            run
            for run in self.client.search_runs([self.experiment_id], query, order_by=["attributes.start_time DESC"])
            if run.data.tags.get(Tag.STORAGE_URI, run.data.tags.get(Tag.SWEEP_DIR)) == self.spec.storage_uri
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
            [self.experiment_id], f"tags.`{Tag.PARENT_RUN_ID}` = '{self.parent_run_id}'"
        )
        for child in sorted(children, key=lambda r: int(r.data.tags.get(Tag.TRIAL_NUMBER, 0))):
            record = self._record_from_run(child)
            self.book.trials[record.trial_id] = record
            self.child_run_ids[record.trial_id] = child.info.run_id
            if record.finished:
                metrics = child.data.metrics
                self.trial_costs[record.trial_id] = TrialCost(
                    metrics.get(RunMetric.ACCELERATOR_HOURS, 0.0),
                    metrics.get(RunMetric.COST_USD, 0.0),
                    metrics.get(RunMetric.TOKENS, 0.0),
                )
                self.savings[record.trial_id] = metrics.get(RunMetric.SAVED_BY_PRUNING_USD, 0.0)
                if child.info.status == "RUNNING":
                    # The killed driver tagged the trial finished but died before it
                    # ended the run (_end_trial's last write): end it now, as it ended.
                    self.client.set_terminated(child.info.run_id, status=RUN_STATUS[record.state])
        self.client.update_run(self.parent_run_id, status="RUNNING")
        self._mark_running()

    def _record_from_run(self, run) -> TrialRecord:
        tags, metrics = run.data.tags, run.data.metrics
        by_step: dict[int, dict] = {}
        # A user scorer's gen_ metrics (generation.scorer) and each GRPO reward function's mean
        # are reported under names of their own.
        scored = [key for key in metrics if is_reported(key) and key not in REPORTED_KEYS]
        for key in (*REPORTED_KEYS, *scored):
            if key in (STEP, SETUP_SECONDS):
                continue
            for point in self.client.get_metric_history(run.info.run_id, key):
                by_step.setdefault(point.step, {STEP: point.step})[key] = point.value
        history = [by_step[step] for step in sorted(by_step)]
        if history and SETUP_SECONDS in metrics:
            history[0][SETUP_SECONDS] = metrics[SETUP_SECONDS]
        state = TrialState(tags.get(Tag.STATE, TrialState.RUNNING))
        last_seen = max(
            (p.timestamp for p in self.client.get_metric_history(run.info.run_id, self.book.metric)),
            default=run.info.start_time,
        )
        wall = metrics.get(RunMetric.WALL_SECONDS, (last_seen - run.info.start_time) / 1000)
        record = TrialRecord(
            trial_id=tags[Tag.TRIAL_ID],
            number=int(tags[Tag.TRIAL_NUMBER]),
            params=dict(run.data.params),
            # An unfinished trial of an earlier driver continues after `sweep resume`.
            state=state if state.finished else TrialState.STOPPED,
            history=history,
            started_at=time.time(),
            ended_at=time.time(),
            checkpoint_path=tags.get(Tag.CHECKPOINT_PATH),
            prior_wall_seconds=wall,
            pauses=int(metrics.get(RunMetric.PAUSES, 0)),
            startup_trial=tags.get(Tag.STARTUP_TRIAL) == "true",
            warm_start=tags.get(Tag.WARM_START),
            confirms=int(tags[Tag.CONFIRMS]) if Tag.CONFIRMS in tags else None,
        )
        if record.state == TrialState.FAILED:
            record.error = tags.get(Tag.STATUS, "failed").removeprefix("failed: ")
        elif tags.get(Tag.STATUS, "").startswith("stopped: "):  # by a fault (a full disk): `sweep resume` continues it
            record.error = tags[Tag.STATUS].removeprefix("stopped: ")
        return record

    def _data_hashes(self) -> dict[str, str]:
        from trainables.data import file_sha256

        return {"train": file_sha256(self.spec.data.train), "eval": file_sha256(self.spec.data.eval)}

    def discard_trials(self, records: list) -> None:
        """Forget trials that will never run (SweepDriver.lost_trials): their child runs are
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
        for record in self.book.trials.values():
            if record.trial_id in self.child_run_ids and record.trial_id not in self.trial_costs:
                if not record.finished:
                    record.stop_clock()
                    record.state = TrialState.STOPPED
                self._end_trial(record)
        totals = sweep_cost(list(self.trial_costs.values()), list(self.savings.values()))
        now = int(time.time() * 1000)
        metrics = {
            RunMetric.TRIALS_COMPLETED: self.book.count(TrialState.COMPLETED),
            RunMetric.TRIALS_PRUNED: self.book.count(TrialState.PRUNED),
            RunMetric.TRIALS_FAILED: self.book.count(TrialState.FAILED),
            RunMetric.TRIALS_TOTAL: len(self.book.trials),
            RunMetric.COST_USD_TOTAL: totals.usd,
            RunMetric.SAVED_BY_PRUNING_USD: totals.saved_by_pruning_usd,
            RunMetric.ACCELERATOR_HOURS_TOTAL: totals.accelerator_hours,
            RunMetric.TOKENS_TOTAL: totals.tokens,
            RunMetric.WALL_SECONDS: time.time() - self.book.started_at,
        }
        if totals.usd_per_million_tokens is not None:
            metrics[RunMetric.USD_PER_MILLION_TOKENS] = totals.usd_per_million_tokens
        tags = []
        best = self.book.best()
        if best:
            metrics[RunMetric.best(self.book.metric)] = best.last(self.book.metric)
            tags += [
                RunTag(Tag.BEST_TRIAL_ID, best.trial_id),
                # A run made while the server was away has its real id only since it came back.
                RunTag(Tag.BEST_RUN_ID, getattr(self.client, "ids", {}).get(*[self.child_run_ids.get(best.trial_id, "")] * 2)),
            ]
            config = single_run_spec(self.spec, best.params, name=f"{self.spec.name}-best")
            picked = self.book.confirmation.picked_by(self.spec.name) if self.book.chosen else picked_by(self.spec)  # search.confirm
            self.client.log_text(self.parent_run_id, picked + spec_to_yaml(config), "best_config.yaml")
        status = SweepStatus.STOPPED if interrupted else (SweepStatus.FINISHED if best else SweepStatus.FAILED)
        tags.append(RunTag(Tag.STATUS, status))
        self.client.log_batch(
            self.parent_run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()], tags=tags
        )
        run_status = "KILLED" if interrupted else ("FINISHED" if best else "FAILED")
        self.client.set_terminated(self.parent_run_id, status=run_status)
        return totals

    # ------------------------------------------------------------ trials (child runs)

    def trial_started(self, record: TrialRecord) -> None:
        if record.trial_id in self.child_run_ids:  # continued after `sweep resume`: same run
            run_id = self.child_run_ids[record.trial_id]
            self.trial_costs.pop(record.trial_id, None)
            self.client.update_run(run_id, status="RUNNING")
            running = TrialState.RUNNING
            self.client.log_batch(run_id, tags=[RunTag(Tag.STATUS, running), RunTag(Tag.STATE, running)])
            return
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"{self.spec.name}-trial-{record.number}",
            tags={
                Tag.PARENT_RUN_ID: self.parent_run_id,
                Tag.KIND: RunKind.TRIAL,
                Tag.SWEEP_NAME: self.spec.name,
                Tag.TRIAL_ID: record.trial_id,
                Tag.TRIAL_NUMBER: str(record.number),
                Tag.STATUS: TrialState.RUNNING,
                Tag.STATE: TrialState.RUNNING,
                # What the searcher marked the trial with.
                **({Tag.STARTUP_TRIAL: "true"} if record.startup_trial else {}),
                **({Tag.WARM_START: record.warm_start} if record.warm_start else {}),
                **({Tag.CONFIRMS: str(record.confirms)} if record.confirms is not None else {}),
            },
        )
        self.child_run_ids[record.trial_id] = run.info.run_id
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in record.params.items()])

    def trial_paused(self, record: TrialRecord) -> None:
        """Tagged so, for `sweep status` while the sweep runs."""
        run_id = self.child_run_ids.get(record.trial_id)
        if run_id:
            self.client.log_batch(
                run_id,
                metrics=[Metric(RunMetric.PAUSES, record.pauses, int(time.time() * 1000), record.step)],
                tags=[RunTag(Tag.STATUS, record.status_text), RunTag(Tag.STATE, TrialState.PAUSED)],
            )

    def trial_result(self, record: TrialRecord) -> None:
        run_id = self.child_run_ids.get(record.trial_id)
        if run_id is None or not record.history:
            return
        report = record.history[-1]
        now = int(time.time() * 1000)
        step = int(report.get(STEP, 0))
        metrics = [
            Metric(key, float(value), now, step)
            for key, value in report.items()
            if key not in (STEP, SETUP_SECONDS) and isinstance(value, (int, float))
        ]
        # Its micro-batch halved after running out of memory: said in words too.
        tags = [RunTag(Tag.OUT_OF_MEMORY, record.out_of_memory)] if OUT_OF_MEMORY_AT_MICRO_BATCH in report else []
        self.client.log_batch(run_id, metrics=metrics, tags=tags)
        if GENERATED_ANSWERS in report:  # a few of the trial's answers at this step
            self.client.log_text(run_id, report[GENERATED_ANSWERS], f"answers/step-{step:06d}.json")
        self._check_server()

    def trial_finished(self, record: TrialRecord) -> None:
        self._end_trial(record)
        self._check_server()

    def _check_server(self) -> None:
        """Past tracking.away_limit_s without the server: stop the sweep as on Ctrl-C (what
        it could not log stays in the backlog, for `sweep resume`)."""
        outages = getattr(self.client, "outages", None)
        if not outages or outages[-1].ended is not None or self.gave_up:
            return
        if outages[-1].seconds > self.spec.tracking.away_limit_s:
            self.gave_up = (
                f"tracking.uri: the MLflow server at {self.uri} has not answered for {outages[-1].seconds:.0f} s "
                f"(tracking.away_limit_s); the sweep stopped, its trials saved, and what it could not log is kept in "
                f"{self.client.backlog_path}. Once the server answers, continue it with: sweep resume {self.spec.name}"
            )
            signal.raise_signal(signal.SIGINT)

    def outage_notes(self) -> list[str]:
        """For the summary: how long the server was away, and whether all was logged since."""
        outages = getattr(self.client, "outages", None) or []
        if not outages:
            return []
        away = sum(outage.seconds for outage in outages)
        kept = sum(outage.writes for outage in outages)
        if outages[-1].ended is None and not self.client.flush():
            return [f"MLflow server {self.uri} away for {away:.0f} s in {len(outages)} outage(s); {kept} writes kept in "
                    f"{self.client.backlog_path}, logged by sweep resume {self.spec.name}"]
        return [f"MLflow server {self.uri} away for {away:.0f} s in {len(outages)} outage(s); the {kept} writes made "
                f"meanwhile were kept here and logged once it was back: nothing lost"]

    def _end_trial(self, record: TrialRecord) -> None:
        run_id = self.child_run_ids.get(record.trial_id)
        if run_id is None or record.trial_id in self.trial_costs:
            return
        wall = record.wall_seconds
        cost = self.rate.trial_cost(wall, record.train_tokens)
        setup = record.setup_seconds or 0.0
        saving = (
            pruning_saving(
                wall, setup, record.step, self.book.max_steps, self.rate.accelerators_per_trial, self.rate.usd_per_hour
            )
            if record.state == TrialState.PRUNED
            else 0.0
        )
        self.trial_costs[record.trial_id] = cost
        self.savings[record.trial_id] = saving
        now = int(time.time() * 1000)
        values = {
            RunMetric.COST_USD: cost.usd,
            RunMetric.ACCELERATOR_HOURS: cost.accelerator_hours,
            RunMetric.TOKENS: cost.tokens,
            RunMetric.WALL_SECONDS: wall,
            RunMetric.STEPS_TRAINED: record.step,
            RunMetric.SAVED_BY_PRUNING_USD: saving,
            RunMetric.PAUSES: record.pauses,
        }
        if record.setup_seconds is not None:
            values[SETUP_SECONDS] = record.setup_seconds
        if cost.usd_per_million_tokens is not None:
            values[RunMetric.USD_PER_MILLION_TOKENS] = cost.usd_per_million_tokens
        final = record.last(self.book.metric)
        if final is not None:
            values[RunMetric.final(self.book.metric)] = final
        tags = [RunTag(Tag.STATUS, record.status_text), RunTag(Tag.STATE, record.state)]
        if record.checkpoint_path:
            tags.append(RunTag(Tag.CHECKPOINT_PATH, record.checkpoint_path))
        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), now, record.step) for k, v in values.items()], tags=tags
        )
        self.client.set_terminated(run_id, status=RUN_STATUS[record.state])
