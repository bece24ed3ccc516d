"""One Tune trial: fit a Ray Train TorchTrainer on the trial's config. Each of its
evaluations reaches Tune (and ASHA, and the searcher) as a Tune report.

A trial is cheap to start because it starts as few processes as it can: Tune reuses the
trial's actor for the next trial (`TuneConfig(reuse_actors=True)`, sweeper/run/_launch.py),
the Train controller runs inside that actor instead of in an actor of its own, and the
Ray Data, report-queue and placement-group-cleaner actors that Ray starts for every run
are left out (sweeper/cluster/ray_adapter.py). What remains new per trial is what the run needs:
its placement group, its Train workers (which do the training) and Train's
synchronization actor. On a Ray other than the one the adapter was tested against, the
trial takes Train's public path instead: a plain TorchTrainer whose controller is an actor
of its own, reports through Ray's TuneReportCallback, and no actor reuse.

When Tune stops the trial (ASHA pruned it, or the sweep is over), the Train run is
aborted at once: its workers give their CPUs/GPUs back to the next trial instead of
training on (and the driver removes the run's placement group itself the moment Tune is
done with the trial: sweeper/run/_release.py).

No wait is without end: workers that cannot be placed and started within the sweep's
worker start timeout (`worker_start_timeout`) fail the trial with `WorkersNotPlaced`,
which names what the workers asked for and what the cluster had free. Ray Train does not
retry that start (its `controller_failure_limit` is 0 here, where Ray's default retries
without end); a run whose workers failed while training is retried from its checkpoint up
to `search.max_failures` times. On the public path the trial, not Train's controller, does
that retry (`retry_run`): Tune ends a stopped trial by removing the placement group its
actor and the controller run in, the workers die with their owner while the controller's
process is still exiting, and a controller allowed to retry would start a worker group in
a new placement group that nothing removes (Train's cleaner knows only the groups of
started worker groups), holding the workers' CPUs until the sweep ends.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, WorkerGroupError
from ray.train.v2.api.callback import UserCallback
from ray.tune.integration.ray_train import TuneReportCallback

from sweeper.cluster import storage, ray_adapter, free_resources_text, resources_text
from sweeper.cluster.ray_adapter import ON_THE_HEAD_NODE, tune_stop_event, workers_never_started
from sweeper.cost import trial_forecast_gib
from trainables.config import TrialConfig
from trainables.metrics import PREEMPTION_CHECKPOINT, RESTARTS
from trainables.worker import train_loop_per_worker

logger = logging.getLogger(__name__)


# Ray Train reads its worker start timeout from this variable, in the process running the
# Train controller (here the trial's own); it says so in its timeout error.
WORKER_START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# The least time a trial's workers get to be placed and started, and how many measured
# trial starts they get beyond it.
WORKER_START_FLOOR_S = 60.0
WORKER_START_MEASURED_TIMES = 10
# What a trial's own process (Tune's trial actor) asks for: it only waits on its
# TorchTrainer, whose workers hold the CPUs and GPUs, and it stays on the head node (a
# lost worker node must not take it along).
TRIAL_ACTOR_RESOURCES = {"cpu": 0, "memory": 1024**2, **ON_THE_HEAD_NODE}
# What makes a process see no GPU: CUDA reads it once, when torch first initialises CUDA.
NO_VISIBLE_DEVICE = {"CUDA_VISIBLE_DEVICES": ""}


def trainable_name(spec) -> str:
    """Tune's name for the sweep's trainable: the dashboard shows it as each trial
    actor's Repr (Tune gives its function trainables no actor name; a trial actor runs
    several trials, and Ray reads a Repr once, so it names the sweep, not the trial)."""
    return f"sweep-{spec.name}"


def trial_name(sweep_name: str, trial) -> str:
    """Tune's name for a trial (TuneConfig's trial_name_creator), `sweep-<name>-trial-<N>`
    with N its number in the live table, MLflow and `sweep status`: the Repr of its Ray
    Train workers in the dashboard (sweeper/run/_trial.py)."""
    from sweeper.cluster.ray_adapter import tune_trial_number

    return f"sweep-{sweep_name}-trial-{tune_trial_number(trial)}"


def make_trainable(spec, data: dict, cache_root: Path, forecast):
    """The function each trial runs, with what every trial shares: its config before the
    sampled values, the tokenized `data` (in Ray's object store, once) and where to write.
    `forecast`: the sweep's (None for a resumed sweep: its first driver's)."""
    import ray

    timeout_s = worker_start_timeout(
        spec.resources.worker_start_timeout_s, forecast.timing.setup_seconds if forecast else None
    )
    logger.info(
        "A trial whose workers are not placed and started within %.0f s fails, saying why "
        "(resources.worker_start_timeout_s)", timeout_s,
    )
    trainable = tune.with_parameters(
        run_trial,
        trial_config=spec.trial_config(),
        max_failures=spec.search.max_failures,
        # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
        data={"ref": ray.put(data)},
        cache_root=str(cache_root),
        trials_dir=storage.join(spec.storage_uri, "trials"),
        worker_start_timeout_s=timeout_s,
    )
    trainable = tune.with_resources(trainable, TRIAL_ACTOR_RESOURCES)
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
    """The runtime environment of a trial's Train workers. A trial with `resources.use_gpu:
    false` gets no visible GPU: Ray sets `CUDA_VISIBLE_DEVICES` only for workers that hold
    GPUs, and leaves it as the node has it for the others, so on a GPU node a CPU trial
    would otherwise train on the node's first GPU while billed as CPU. The variable is set
    when the worker process starts, before Ray Train's own setup first asks torch for CUDA.
    A GPU trial's workers keep what Ray sets: the GPUs it assigned them."""
    if resources.use_gpu:
        return {}
    return {"env_vars": dict(NO_VISIBLE_DEVICE)}


def run_trial(
    config: dict,
    trial_config: TrialConfig,
    max_failures: int,
    data: dict,
    cache_root: str,
    trials_dir: str,
    worker_start_timeout_s: float,
    train_loop=train_loop_per_worker,
) -> None:
    """Tune's function trainable: this trial's TorchTrainer, fitted until it finishes or
    Tune stops the trial. `config` holds the trial's sampled values (dotted path -> value),
    applied to the sweep's `trial_config`; the Train workers receive the result.
    `max_failures`: retries of the Train run from its latest checkpoint. Checkpoints go to
    `trials_dir`, from the driver: s3://bucket/prefix/trials or an absolute folder (the
    trial runs in Tune's working directory, where a relative sweep folder would resolve
    somewhere else, Ray's session folder). Its file system is resolved here, on the
    trial's node, from that node's AWS variables. `train_loop`: what each Train worker runs
    (the trial's loop; a test gives one that reports what the worker sees)."""
    started_at = time.time()
    trial = trial_config.with_values(config)
    resources = trial.resources
    storage_filesystem, storage_path = storage.filesystem(trials_dir)
    per_worker = {"CPU": resources.cpus_per_worker, **resources.custom}
    if resources.gpus_per_worker:
        per_worker["GPU"] = resources.gpus_per_worker
    in_trial_thread = ray_adapter.reports_in_trial_thread()

    train_loop_config = {
        "trial": trial,
        "data": data,
        "cache_root": cache_root,
        "started_at": started_at,
        # For the reason of a trial that runs out of memory even at half its micro-batch.
        "memory_forecast_gib": trial_forecast_gib(trial),
    }
    scaling_config = ScalingConfig(
        num_workers=resources.workers_per_trial, use_gpu=resources.use_gpu, resources_per_worker=per_worker
    )

    def trainer(restarts: int):
        """The trial's Train run; `restarts`: the runs before it that failed (public path)."""
        return ray_adapter.TrialTrainer(
            train_loop_per_worker=train_loop,
            train_loop_config=train_loop_config,
            scaling_config=scaling_config,
            run_config=RunConfig(
                name=tune.get_context().get_trial_id(),
                storage_path=storage_path,
                storage_filesystem=storage_filesystem,
                worker_runtime_env=worker_runtime_env(resources),
                callbacks=[ReportToTune() if in_trial_thread else ReportToTuneThroughQueue(restarts)],
                checkpoint_config=CheckpointConfig(num_to_keep=1),
                # Ray Train restarts the worker group from the latest checkpoint (on the
                # public path the trial starts a new run instead: retry_run); a worker group
                # that cannot start is not retried (the timeout above is the bound).
                failure_config=FailureConfig(
                    max_failures=max_failures if in_trial_thread else 0, controller_failure_limit=0
                ),
            ),
        )

    os.environ[WORKER_START_TIMEOUT_ENV] = f"{worker_start_timeout_s:g}"
    restarts = 0
    while True:
        try:
            # The dashboard shows the trial's name (sweep and trial number) as its workers' Repr.
            trainer(restarts).fit_until(tune_stop_event(), worker_repr=tune.get_context().get_trial_name())
            return
        except Exception as error:
            if workers_never_started(error):
                raise WorkersNotPlaced(
                    f"its {resources.workers_per_trial} worker(s) of {resources_text(per_worker)} each were not "
                    f"placed within {worker_start_timeout_s:g} s (resources.worker_start_timeout_s); the cluster "
                    f"had free: {free_resources_text()}"
                ) from error
            if in_trial_thread or not retry_run(error, restarts, max_failures, tune_ended_this_trial):
                raise
            restarts += 1
            logger.warning("trial %s: its workers failed (%s); run %d of at most %d starts from its last checkpoint",
                           tune.get_context().get_trial_name(), error, restarts + 1, max_failures + 1)


def retry_run(error: BaseException, restarts: int, max_failures: int, trial_ended) -> bool:
    """Whether a trial on ray_adapter's public path starts its Train run again after `error`
    (a new run of the same name, which resumes from the run's latest checkpoint): when its
    workers failed (Train's WorkerGroupError), fewer than `max_failures` restarts ago, and
    `trial_ended()` says Tune has not ended the trial meanwhile."""
    return isinstance(error, WorkerGroupError) and restarts < max_failures and not trial_ended()


def tune_ended_this_trial() -> bool:
    """Whether Tune has ended the calling trial: the placement group Tune placed the trial's
    actor in is removed (Tune removes it as it ends the trial's actor). False outside one."""
    import ray
    from ray.util.placement_group import placement_group_table

    group = ray.util.get_current_placement_group()
    return group is not None and (placement_group_table(group) or {}).get("state") == "REMOVED"


class ReportToTune(UserCallback):
    """Each report of the Train run becomes a Tune report of this trial, with the path of
    its checkpoint (a URI for object storage) and, once a worker has failed and Train has
    restarted the workers from that checkpoint, how often it has (RESTARTS: the trial's
    MLflow run shows at which step). A checkpoint kept because the trial's node is being
    taken away is Train's alone: no Tune report (trainables/preemption.py). The controller
    runs in the trial's own thread
    (StoppableTorchTrainer), so this is a plain `tune.report`; Ray's TuneReportCallback
    instead passes reports through a queue actor, a process per trial."""

    def __init__(self, worker_failures: int = 0) -> None:
        self.worker_failures = worker_failures

    def after_exception(self, run_context, worker_exceptions) -> None:
        # Called once per failed poll of the worker group; Train then retries (or, past
        # search.max_failures, ends the trial, and no report follows).
        self.worker_failures += 1

    def after_report(self, run_context, metrics, checkpoint) -> None:
        result = tune_result(metrics, checkpoint, self.worker_failures)
        if result is not None:
            self.deliver(run_context, result)

    def deliver(self, run_context, result: dict) -> None:
        tune.report(result)


def tune_result(metrics: list[dict], checkpoint, worker_failures: int) -> dict | None:
    """What a Train report tells Tune: rank 0's metrics, its checkpoint's path (a URI for
    object storage) and the workers' restarts so far; None for a preemption checkpoint."""
    if metrics[0].get(PREEMPTION_CHECKPOINT):
        return None  # kept for the run's restart on another node, not an evaluation (trainables/preemption.py)
    result = dict(metrics[0])
    if checkpoint is not None:
        result["checkpoint_path"] = storage.uri_of(checkpoint.filesystem, checkpoint.path)
    if worker_failures:
        result[RESTARTS] = worker_failures
    return result


class ReportToTuneThroughQueue(ReportToTune, TuneReportCallback):
    """ReportToTune for a controller in an actor of its own (ray_adapter's public path):
    Ray's TuneReportCallback carries the same result to the trial. `worker_failures`: the
    trial's restarts of its Train run so far (run_trial starts a new run after a failure)."""

    def __init__(self, worker_failures: int = 0) -> None:
        TuneReportCallback.__init__(self)
        ReportToTune.__init__(self, worker_failures)

    def deliver(self, run_context, result: dict) -> None:
        TuneReportCallback.after_report(self, run_context, [result], None)
