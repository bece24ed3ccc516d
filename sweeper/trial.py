"""One Tune trial: fit a Ray Train TorchTrainer on the trial's config. Each of its
evaluations reaches Tune (and ASHA, and the searcher) as a Tune report.

A trial is cheap to start because it starts as few processes as it can: Tune reuses the
trial's actor for the next trial (`TuneConfig(reuse_actors=True)`, sweeper/launch.py),
the Train controller runs inside that actor instead of in an actor of its own, and the
Ray Data, report-queue and placement-group-cleaner actors that Ray starts for every run
are dropped or shared. What remains new per trial is what the run needs: its placement
group, its Train workers (which do the training) and Train's synchronization actor.

When Tune stops the trial (ASHA pruned it, or the sweep is over), the Train run is
aborted at once: its workers give their CPUs/GPUs back to the next trial instead of
training on.
"""

from __future__ import annotations

import asyncio
import threading
import time

import ray
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.controller.state import AbortedState
from ray.train.v2.api.callback import UserCallback

from sweeper.spec import SweepSpec, with_overrides
from trainables.worker import train_loop_per_worker

# How often the trial checks whether Tune has stopped it.
STOP_POLL_SECONDS = 0.05


def run_trial(config: dict, spec_json: dict, data: dict, cache_root: str, trials_dir: str) -> None:
    """Tune's function trainable: this trial's TorchTrainer, fitted until it finishes or
    Tune stops the trial. Checkpoints go to `trials_dir`, an absolute path from the
    driver: the trial runs in Tune's working directory, where a relative sweep folder
    would resolve somewhere else (Ray's session folder)."""
    started_at = time.time()
    spec = with_overrides(SweepSpec.model_validate(spec_json, context={"check_files": False}), config)
    resources = spec.resources
    per_worker = {"CPU": resources.cpus_per_worker}
    if resources.gpus_per_worker:
        per_worker["GPU"] = resources.gpus_per_worker
    trainer = TrialTorchTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={
            "spec": spec.model_dump(mode="json"),
            "data": data,
            "cache_root": cache_root,
            "started_at": started_at,
        },
        scaling_config=ScalingConfig(
            num_workers=resources.workers_per_trial, use_gpu=resources.use_gpu, resources_per_worker=per_worker
        ),
        run_config=RunConfig(
            name=tune.get_context().get_trial_id(),
            storage_path=trials_dir,
            callbacks=[ReportToTune()],
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            # Ray Train restarts the worker group from the latest checkpoint.
            failure_config=FailureConfig(max_failures=spec.search.max_failures),
        ),
    )
    trainer.fit_until(_tune_stop_event())


def _tune_stop_event() -> threading.Event:
    """Set by Tune when it stops this trial or hands its actor to the next trial. Ray
    2.60 exposes no public handle for it: it is the function-trainable session's."""
    from ray.train._internal.session import get_session

    return get_session().stop_event


class ReportToTune(UserCallback):
    """Each report of the Train run becomes a Tune report of this trial, with the path of
    its checkpoint. The controller runs in the trial's own thread (TrialTorchTrainer), so
    this is a plain `tune.report`; Ray's TuneReportCallback instead passes reports through
    a queue actor, a process per trial."""

    def after_report(self, run_context, metrics, checkpoint) -> None:
        result = dict(metrics[0])
        if checkpoint is not None:
            result["checkpoint_path"] = checkpoint.path
        tune.report(result)


class SharedPlacementGroupCleaner(PlacementGroupCleanerCallback):
    """Ray's safety net, one per trial actor instead of one per trial: a detached actor
    that watches the process running the controller and removes its current placement
    group should that process die without ending its run. The trial actor runs one run
    at a time, and the cleaner tracks the latest placement group registered with it."""

    _cleaner_of_this_process = None

    def after_controller_start(self, train_run_context) -> None:
        cleaner = SharedPlacementGroupCleaner._cleaner_of_this_process
        if cleaner is None:
            super().after_controller_start(train_run_context)
            SharedPlacementGroupCleaner._cleaner_of_this_process = self._cleaner
        else:
            self._cleaner = cleaner
            self._controller_actor_id = ray.get_runtime_context().get_actor_id()

    async def before_controller_shutdown(self) -> None:
        """Kept watching for the next trial: the run removes its own placement group."""

    def before_controller_abort(self) -> None:
        """As above."""


class TrialTorchTrainer(TorchTrainer):
    """A TorchTrainer whose controller runs in the calling thread, and which aborts its run
    when `stop` is set.

    It overrides private methods of Ray 2.60's DataParallelTrainer (tests/unit/
    test_trial.py fails when a Ray upgrade removes them):
    - `_initialize_and_run_controller` builds the TrainController here and runs its loop
      in this thread instead of starting an actor (a process importing torch) for it;
    - `_create_default_callbacks` drops DatasetsCallback when there are no Ray Datasets
      (it starts a Ray Data actor for every run) and shares the placement-group cleaner.
    """

    _stop: threading.Event | None = None

    def fit_until(self, stop: threading.Event) -> None:
        """`fit()`, unless `stop` is set first: then the run is aborted (its workers are
        killed and its placement group removed) and this returns."""
        self._stop = stop
        self.fit()

    def _create_default_callbacks(self):
        callbacks = []
        for callback in super()._create_default_callbacks():
            if isinstance(callback, DatasetsCallback) and not self.datasets:
                continue
            if isinstance(callback, PlacementGroupCleanerCallback):
                callback = SharedPlacementGroupCleaner()
            callbacks.append(callback)
        return callbacks

    def _initialize_and_run_controller(self, **controller_init_kwargs):
        controller = TrainController(**controller_init_kwargs)
        try:
            asyncio.run(self._run_until_stopped(controller))
        except BaseException:
            # Tune stopped the trial while a report was waiting for it (the session ends
            # the thread with SystemExit), or the loop itself failed.
            _abort(controller)
            raise
        return controller.get_result()

    async def _run_until_stopped(self, controller: TrainController) -> None:
        run = asyncio.ensure_future(controller.run())
        while not run.done():
            if self._stop is not None and self._stop.is_set():
                run.cancel()
                try:
                    await run
                except asyncio.CancelledError:
                    pass
                _abort(controller)
                return
            await asyncio.wait({run}, timeout=STOP_POLL_SECONDS)
        run.result()


def _abort(controller: TrainController) -> None:
    """TrainController.abort without its last line, which ends the actor it runs in: here
    that is the trial's actor, which Tune reuses."""
    if controller.get_state().is_terminal():
        return
    controller._controller_callback_manager.invoke_best_effort("before_controller_abort")
    worker_group = controller.get_worker_group()
    if worker_group is not None and worker_group.has_started():
        worker_group.abort()
    controller._set_state(AbortedState())
