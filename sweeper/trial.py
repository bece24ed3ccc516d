"""One Tune trial: fit a Ray Train TorchTrainer on the trial's config. Its workers'
reports reach Tune (and ASHA) through TuneReportCallback.

When Tune stops the trial (ASHA pruned it, or the sweep is over), the Train run is
aborted at once: its workers give their CPUs/GPUs back to the next trial instead of
training on until their process is killed, and the trial's actor can be reused for the
next trial (`TuneConfig(reuse_actors=True)`, see sweeper/launch.py), so that a trial does
not start and import a fresh process of its own.
"""

from __future__ import annotations

import threading
import time

import ray
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks import DatasetsCallback
from ray.train.v2._internal.constants import DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE, get_env_vars_to_propagate
from ray.train.v2._internal.execution.controller import TrainController
from ray.tune.integration.ray_train import TuneReportCallback

from sweeper.spec import SweepSpec, with_overrides
from trainables.worker import train_loop_per_worker

# How long an aborted run may take to end before its controller is killed outright.
ABORT_GRACE_SECONDS = 2.0


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
    trainer = StoppableTorchTrainer(
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
            callbacks=[TuneReportCallback()],
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


class StoppableTorchTrainer(TorchTrainer):
    """A TorchTrainer that can be aborted from the thread that fits it, and that starts no
    Ray Data actor when it is given no Ray Datasets.

    Both override private methods of Ray 2.60's DataParallelTrainer (tests/unit/
    test_trial.py fails when a Ray upgrade removes them):
    - `_initialize_and_run_controller` is Ray's, except that it keeps the controller's
      handle (and registers no SIGINT handler: a trial never runs in the main thread);
    - `_create_default_callbacks` drops DatasetsCallback, which otherwise starts a
      DatasetManager actor (a process importing Ray Data) for every trial.
    """

    _controller = None

    def fit_until(self, stop: threading.Event) -> bool:
        """`fit()`, unless `stop` is set first: then abort the run and return False."""
        finished = threading.Event()
        watcher = threading.Thread(target=self._abort_when_set, args=(stop, finished), daemon=True)
        watcher.start()
        try:
            self.fit()
            return True
        except Exception:
            if stop.is_set():
                return False
            raise
        finally:
            finished.set()

    def _abort_when_set(self, stop: threading.Event, finished: threading.Event) -> None:
        while not finished.is_set():
            if stop.wait(timeout=0.05) and self._controller is not None:
                # Graceful: the controller stops its workers and removes their placement
                # group. A controller blocked inside a callback cannot take the call, so
                # after a grace period it is killed (Train's placement-group cleaner then
                # removes the placement group).
                self._controller.abort.remote()
                if not finished.wait(timeout=ABORT_GRACE_SECONDS):
                    ray.kill(self._controller, no_restart=True)
                return

    def _create_default_callbacks(self):
        callbacks = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]

    def _initialize_and_run_controller(self, **controller_init_kwargs):
        from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR

        env_vars = get_env_vars_to_propagate()
        env_vars.setdefault(RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR, DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE)
        controller_class = ray.remote(
            num_cpus=0,
            # The controller runs on the node of the process that fits the trainer.
            label_selector={ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()},
            runtime_env={"env_vars": env_vars},
        )(TrainController)
        self._controller = controller_class.remote(**controller_init_kwargs)
        ray.get(self._controller.run.remote())
        return ray.get(self._controller.get_result.remote())
