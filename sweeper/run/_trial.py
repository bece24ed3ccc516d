"""One Tune trial: train the trial's config, each of its evaluations reaching Tune (and
ASHA, and the searcher) as a Tune report. Two shapes, both through Ray's public API:

- **One worker** (`resources.workers_per_trial: 1`, the usual LoRA trial): Ray Train's
  local mode (`ScalingConfig(num_workers=0)`) runs the training loop in the Tune trial's
  own process, which holds the worker's CPUs and GPUs. Tune reuses that process for the
  next trial (`TuneConfig(reuse_actors=True)`, sweeper/run/_launch.py), so torch,
  transformers and peft are imported once per process, not once per trial: a trial's
  start is its model and data, not a new Python. The loop reports through `tune.report`
  (Ray Train's own report is refused inside a Tune trial) and its checkpoints go where a
  Train run's would, `<trials_dir>/<trial id>/` (`TrialStorage`), so that promotion,
  resume and the adapter janitor read one layout. What one trial may change in the
  process, it gives back (`trial_process`).
- **Several workers** (DDP, ZeRO, FSDP): a Ray Train `TorchTrainer` whose controller and
  worker group are Train's own; the controller hands each report to the trial's own
  process through a Ray queue, and the trial reports it to Tune itself, every one of them
  before it returns (`fit_reporting_to_tune`); the trial's process holds no CPU and stays
  on the head node. Tune does not reuse these processes: a stopped trial's actor ends,
  and its Train run with it.

Either way a trial whose training fails is retried by Tune from its latest checkpoint, up
to `search.max_failures` times (`tune.FailureConfig`, sweeper/run/_launch.py): the
retried trial finds the checkpoint in its trials folder (a Train run of the same name
resumes from it; a one-worker trial reads it from `TrialStorage`). Workers of a several-
worker trial that cannot be placed and started within the sweep's worker start timeout
fail the trial with `WorkersNotPlaced`, which names what they asked for and what the
cluster had free; a one-worker trial waits for its process to be placed as Tune waits,
and the driver's watchdog says what the cluster is waiting on (sweeper/run/_watchdog.py).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

from ray import tune
from ray.train import CheckpointConfig, ControllerError, FailureConfig, RunConfig, ScalingConfig, UserCallback
from ray.util.queue import Empty, Queue

from sweeper.cluster import storage, free_resources_text, resources_text
from sweeper.cluster.ray_adapter import ON_THE_HEAD_NODE, tune_trial_number
from sweeper.cost import trial_forecast_gib
from trainables.common import REPORT_FILE
from trainables.config import TrialConfig
from trainables.metrics import PREEMPTION_CHECKPOINT
from trainables.preemption import NO_NOTICE
from trainables.random_states import process_random_states, set_process_random_states
from trainables.worker import train_loop_per_worker

logger = logging.getLogger(__name__)


# Ray Train reads its worker start timeout from this variable, in the process running the
# Train controller's owner (here the trial's own); it says so in its timeout error.
WORKER_START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# The least time a trial's workers get to be placed and started, and how many measured
# trial starts they get beyond it.
WORKER_START_FLOOR_S = 60.0
WORKER_START_MEASURED_TIMES = 10
# What the own process of a several-worker trial asks for: it only waits on its
# TorchTrainer, whose workers hold the CPUs and GPUs, and it stays on the head node (a
# lost worker node must not take it along).
WAITING_TRIAL_RESOURCES = {"cpu": 0, "memory": 1024**2, **ON_THE_HEAD_NODE}
# What makes a process see no GPU: CUDA reads it once, when torch first initialises CUDA.
NO_VISIBLE_DEVICE = {"CUDA_VISIBLE_DEVICES": ""}
# A one-worker trial's checkpoint folders in its trials folder: the optimizer step, padded,
# so that the latest sorts last.
CHECKPOINT_PREFIX = "checkpoint_"
# How often a several-worker trial looks at its Train run between reports: how late it
# notices the run has ended.
REPORT_WAIT_S = 0.5


def trainable_name(spec) -> str:
    """Tune's name for the sweep's trainable: the dashboard shows it as each trial
    actor's Repr (Tune gives its function trainables no actor name; a trial actor runs
    several trials, and Ray reads a Repr once, so it names the sweep, not the trial)."""
    return f"sweep-{spec.name}"


def trial_name(sweep_name: str, trial) -> str:
    """Tune's name for a trial (TuneConfig's trial_name_creator), `sweep-<name>-trial-<N>`
    with N its number in the live table, MLflow and `sweep status`."""
    return f"sweep-{sweep_name}-trial-{tune_trial_number(trial)}"


def trial_resources(resources) -> dict:
    """What Tune reserves for a trial's own process: a one-worker trial's worker, which
    trains there; else a sliver on the head node, the workers holding the rest."""
    if not resources.in_trial_process:
        return dict(WAITING_TRIAL_RESOURCES)
    held = {"cpu": resources.cpus_per_worker, **resources.custom}
    if resources.gpus_per_worker:
        held["gpu"] = resources.gpus_per_worker
    return held


def make_trainable(spec, data: dict, cache_root: Path, forecast):
    """The function each trial runs, with what every trial shares: its config before the
    sampled values, the tokenized `data` (in Ray's object store, once) and where to write.
    `forecast`: the sweep's (None for a resumed sweep: its first driver's)."""
    import ray

    timeout_s = worker_start_timeout(
        spec.resources.worker_start_timeout_s, forecast.timing.setup_seconds if forecast else None
    )
    if not spec.resources.in_trial_process:
        logger.info(
            "A trial whose workers are not placed and started within %.0f s fails, saying why "
            "(resources.worker_start_timeout_s)", timeout_s,
        )
    trainable = tune.with_parameters(
        run_trial,
        trial_config=spec.trial_config(),
        # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
        data={"ref": ray.put(data)},
        cache_root=str(cache_root),
        trials_dir=storage.join(spec.storage_uri, "trials"),
        worker_start_timeout_s=timeout_s,
    )
    trainable = tune.with_resources(trainable, trial_resources(spec.resources))
    trainable.__name__ = trainable_name(spec)
    return trainable


class WorkersNotPlaced(RuntimeError):
    """A trial's workers could not be placed and started in time."""


def worker_start_timeout(stated_s: float | None, measured_setup_s: float | None) -> float:
    """How long a trial's workers may take to be placed and started: `resources.
    worker_start_timeout_s` where the sweep states it, else ten times the trial start the
    calibration measured, never under a minute (a resumed sweep, not calibrated: a minute)."""
    if stated_s is not None:
        return stated_s
    return max(WORKER_START_FLOOR_S, WORKER_START_MEASURED_TIMES * (measured_setup_s or 0.0))


def worker_runtime_env(resources) -> dict:
    """The runtime environment of a several-worker trial's Train workers. A trial with
    `resources.use_gpu: false` gets no visible GPU: Ray sets `CUDA_VISIBLE_DEVICES` only for
    workers that hold GPUs, and leaves it as the node has it for the others, so on a GPU
    node a CPU trial would otherwise train on the node's first GPU while billed as CPU. A
    GPU trial's workers keep what Ray sets: the GPUs it assigned them."""
    if resources.use_gpu:
        return {}
    return {"env_vars": dict(NO_VISIBLE_DEVICE)}


def run_trial(
    config: dict,
    trial_config: TrialConfig,
    data: dict,
    cache_root: str,
    trials_dir: str,
    worker_start_timeout_s: float,
    train_loop=train_loop_per_worker,
) -> None:
    """Tune's function trainable: train this trial until it finishes or Tune stops it.
    `config` holds the trial's sampled values (dotted path -> value), applied to the
    sweep's `trial_config`. Checkpoints go to `trials_dir`, from the driver: s3://bucket/
    prefix/trials or an absolute folder (the trial runs in Tune's working directory, where
    a relative sweep folder would resolve somewhere else). `train_loop`: what each worker
    runs (the trial's loop; a test gives one that reports what the worker sees)."""
    started_at = time.time()
    trial = trial_config.with_values(config)
    train_loop_config = {
        "trial": trial,
        "data": data,
        "cache_root": cache_root,
        "started_at": started_at,
        # For the reason of a trial that runs out of memory even at half its micro-batch.
        "memory_forecast_gib": trial_forecast_gib(trial),
    }
    trial_id = tune.get_context().get_trial_id()
    if trial.resources.in_trial_process:
        with trial_process(trial.resources):
            train_loop_config["session"] = TrialStorage(storage.join(trials_dir, trial_id))
            train_in_trial_process(train_loop, train_loop_config)
        return
    train_on_worker_group(train_loop, train_loop_config, trial, trial_id, trials_dir, worker_start_timeout_s)


def train_in_trial_process(train_loop, train_loop_config: dict) -> None:
    """Ray Train's local mode: the loop runs here, in the calling thread."""
    from ray.train.torch import TorchTrainer

    TorchTrainer(train_loop, train_loop_config=train_loop_config, scaling_config=ScalingConfig(num_workers=0)).fit()


def train_on_worker_group(train_loop, train_loop_config: dict, trial, trial_id: str, trials_dir: str,
                          worker_start_timeout_s: float) -> None:
    """A Train run of the trial's workers, named by the trial id: a retried or resumed
    trial's run of that name starts from the run's latest checkpoint."""
    from ray.train.torch import TorchTrainer

    resources = trial.resources
    per_worker = {"CPU": resources.cpus_per_worker, **resources.custom}
    if resources.gpus_per_worker:
        per_worker["GPU"] = resources.gpus_per_worker
    storage_filesystem, storage_path = storage.filesystem(trials_dir)
    os.environ[WORKER_START_TIMEOUT_ENV] = f"{worker_start_timeout_s:g}"
    reports = report_queue()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=train_loop_config,
        scaling_config=ScalingConfig(
            num_workers=resources.workers_per_trial, use_gpu=resources.use_gpu, resources_per_worker=per_worker
        ),
        run_config=RunConfig(
            name=trial_id,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            worker_runtime_env=worker_runtime_env(resources),
            callbacks=[ReportToTrial(reports)],
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            # Tune retries a failed trial (search.max_failures), not Train: one retry rule
            # for both shapes of trial. A node being drained moves the run (Train's own
            # preemption retries, which do not count as failures).
            failure_config=FailureConfig(max_failures=0, controller_failure_limit=0),
        ),
    )
    try:
        fit_reporting_to_tune(trainer, reports)
    except ControllerError as error:
        if "timed out" not in str(error.controller_failure):
            raise
        raise WorkersNotPlaced(
            f"its {resources.workers_per_trial} worker(s) of {resources_text(per_worker)} each were not placed "
            f"within {worker_start_timeout_s:g} s (resources.worker_start_timeout_s); the cluster had free: "
            f"{free_resources_text()}"
        ) from error


def report_queue() -> Queue:
    """Where a several-worker trial's Train controller puts its reports for the trial: a
    Ray queue on the trial's own node (the head), holding one report, so that the run
    trains at most a report ahead of Tune, as a one-worker trial does."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return Queue(maxsize=1, actor_options={"num_cpus": 0, "scheduling_strategy": here})


class ReportToTrial(UserCallback):
    """Each report of a several-worker trial's Train run, put on the trial's queue as the
    Tune report it becomes (`tune_result`). Runs in the Train controller."""

    def __init__(self, reports: Queue):
        self.reports = reports

    def after_report(self, run_context, metrics, checkpoint) -> None:
        result = tune_result(metrics, checkpoint)
        if result is not None:
            self.reports.put(result)


def fit_reporting_to_tune(trainer, reports: Queue) -> None:
    """Run `trainer` in a thread while this one, the trial's, reports each of its reports to
    Tune in order, the last one included, then return (or raise the run's error). Tune
    takes a trial's function returning as its end. Ray's own TuneReportCallback leaves the
    reports to the trial actor's main thread, which looks for a report and for the
    function's end one after the other: where the controller notices the run's end soon
    after its last report (it polls every 0.1 s, TRIAL_SETTINGS), the end can overtake that
    report, and a trial that trained to max_steps is recorded as stopped at its previous
    evaluation. The controller puts each report before its run ends, so a run seen ended
    has nothing left to put."""
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as error:  # raised below, in the trial's thread
            outcome["error"] = error

    run = threading.Thread(target=fit, name="train-run", daemon=True)
    run.start()
    try:
        while True:
            ended = not run.is_alive()
            try:
                tune.report(reports.get(timeout=REPORT_WAIT_S))
            except Empty:
                if ended:
                    break
    finally:
        reports.shutdown(force=True)  # the run has ended, or the trial is being stopped
    if "error" in outcome:
        raise outcome["error"]


def tune_result(metrics: list[dict], checkpoint) -> dict | None:
    """What a Train report tells Tune: rank 0's metrics and its checkpoint's path (a URI
    for object storage); None for a preemption checkpoint."""
    if metrics[0].get(PREEMPTION_CHECKPOINT):
        return None  # kept for the run's restart on another node, not an evaluation (trainables/preemption.py)
    result = dict(metrics[0])
    if checkpoint is not None:
        result["checkpoint_path"] = storage.uri_of(checkpoint.filesystem, checkpoint.path)
    return result


class TrialStorage:
    """A one-worker trial's reports and checkpoints (the loop's session in Ray Train's local
    mode, trainables/worker.py): each checkpoint is copied to `<trial_uri>/checkpoint_<step>`
    (a folder, or s3://...), the one before it removed (one a trial, as Train keeps for a
    worker group), and its path reported to Tune with the metrics; a retried or resumed
    trial starts from the latest one there."""

    world_rank = 0

    def __init__(self, trial_uri: str):
        self.trial_uri = trial_uri

    def preemption_notice(self, moves: dict | None):
        """None: Ray Train tells only its own workers of a node being drained; a trial on
        such a node ends with it, and Tune retries it elsewhere from its latest checkpoint."""
        return NO_NOTICE

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if metrics.get(PREEMPTION_CHECKPOINT):
            return
        result = dict(metrics)
        if checkpoint_dir is not None:
            target = storage.join(self.trial_uri, f"{CHECKPOINT_PREFIX}{int(metrics['step']):06d}")
            storage.upload(Path(checkpoint_dir), target)
            for older in self.checkpoints():
                if older != target:
                    storage.delete(older)
            result["checkpoint_path"] = target
        tune.report(result)

    def checkpoints(self) -> list[str]:
        """The trial's checkpoint folders with a report in them (copied whole), oldest first."""
        import pyarrow.fs

        fs, path = storage.filesystem(self.trial_uri)
        found = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
        folders = sorted(info.base_name for info in found
                         if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith(CHECKPOINT_PREFIX))
        return [storage.join(self.trial_uri, name) for name in folders
                if storage.exists(storage.join(self.trial_uri, name, REPORT_FILE))]

    @contextlib.contextmanager
    def latest_checkpoint(self):
        """The latest checkpoint as a local folder (copied from object storage), or None."""
        found = self.checkpoints()
        if not found:
            yield None
        elif not storage.is_remote(found[-1]):
            yield found[-1]
        else:
            with tempfile.TemporaryDirectory(prefix="sweeper-resume-") as local:
                yield str(storage.download(found[-1], Path(local)))


@contextlib.contextmanager
def trial_process(resources):
    """What a one-worker trial may change in the process that Tune reuses for the next
    trial, given back as the trial ends (finished, failed, or stopped by Tune): environment
    variables, torch's thread count, the random states, and what the trial allocated.
    A CPU trial sees no GPU (CUDA reads the variable when first initialised, so on a GPU
    node every trial of a CPU sweep's process sees none). On CUDA, memory the trial still
    holds after collection is logged, with the trial that left it."""
    import torch

    environ = dict(os.environ)
    threads = torch.get_num_threads()
    random_states = process_random_states()
    if not resources.use_gpu:
        os.environ.update(NO_VISIBLE_DEVICE)
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    allocated_before = torch.cuda.memory_allocated() if cuda else 0
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)
        set_process_random_states(random_states)
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
            left = torch.cuda.memory_allocated() - allocated_before
            if left > 0:
                logger.warning("trial %s left %.0f MiB of CUDA memory allocated in its process after it ended",
                               tune.get_context().get_trial_name(), left / 2**20)
