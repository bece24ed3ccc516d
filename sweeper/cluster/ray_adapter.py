"""Where sweeper relies on parts of Ray that no public API offers: attributes of Tune's
objects and two of Ray's own constants, each entry saying what it relies on and why. No
private module of Ray is imported here or
anywhere in sweeper; a trial runs on Ray Train's public API (sweeper/run/_trial.py).
tests/unit/test_ray_adapter.py and tests/integration/test_ray_adapter.py check each entry
against the installed Ray. Nothing is imported at module level.

Ray Tune (`sweep resume`; sweeper/run/_launch.py, sweeper/search/_asha.py, _tune_state.py,
sweeper/run/_driver.py):
- `tune_trial_number`: a trial's number, from Tune's experiment tag ("<n>_<params>").
- `restore_tuner`: `Tuner.restore` takes no callbacks and hands out neither scheduler,
  searcher nor stopper, whose state the caller rebuilds.
- `save_tune_state`: Tune saves its state every 10 s or more; a scheduler saves it when a
  trial is added, so that a driver killed just after is resumable.
- `hold_restored_trial`: a restored unfinished trial comes back PENDING and Tune starts
  every PENDING trial; a scheduler keeps it PAUSED until it picks it.
- `forget_running_averages`: Tune keeps each ended trial's last 5 and 10 values of every
  reported number, in the driver and in every experiment checkpoint.
Ray core: `NO_WORKER_EVENT_FILES` (RayConfig `event_log_reporter_enabled` in the job's
runtime env: no event file per worker process for the dashboard agent to re-read), and
`ON_THE_HEAD_NODE` (below). Ray client: `ray_address_file`, where `ray start` writes the
address `--address auto` joins, probed so that a dead head is refused in seconds.
"""

from __future__ import annotations

import os

__all__ = [
    "tune_trial_number",
    "restore_tuner",
    "save_tune_state",
    "hold_restored_trial",
    "forget_running_averages",
    "NO_WORKER_EVENT_FILES",
    "ray_address_file",
    "ON_THE_HEAD_NODE",
]


# ---------------------------------------------------------------- Ray Tune


def tune_trial_number(trial) -> int:
    """The number of a Tune trial in its sweep: 1 for the first trial the search
    created, counting on through `sweep resume` (Tune saves its generator's counter).
    Tune's experiment tag starts with the counter: its search generator (a searched
    sweep) counts from 1 and appends the suggested values ("3_training.learning_rate=
    0.0003"); its basic variant generator (a sweep that searches nothing) counts from 0
    and appends nothing ("2")."""
    counter, _, values = trial.experiment_tag.partition("_")
    return int(counter) + (0 if values else 1)


def restore_tuner(path: str, trainable, callbacks: list, storage_filesystem=None, resume_errored: bool = False):
    """`Tuner.restore(path, trainable, resume_unfinished=True)` with `callbacks` in place
    of the ones pickled by the first driver (`resume_errored`: errored trials continue
    from their last checkpoint too). Returns (tuner, scheduler, search_alg, stopper): the
    restored objects Tune will use, for the caller to rebuild their state (no public API
    hands them out: the restored tuner's own)."""
    from ray import tune

    tuner = tune.Tuner.restore(
        path, trainable=trainable, resume_unfinished=True, resume_errored=resume_errored,
        storage_filesystem=storage_filesystem,
    )
    run_config = tuner._local_tuner.get_run_config()
    run_config.callbacks = callbacks
    tune_config = tuner._local_tuner._tune_config
    return tuner, tune_config.scheduler, tune_config.search_alg, run_config.stop


def save_tune_state(tune_controller) -> None:
    """Save Tune's experiment state (trials, searcher, callbacks) and sync it to storage
    now, whatever its period. `tune_controller`: what Tune hands a scheduler."""
    controller = getattr(tune_controller, "_tune_controller", tune_controller)  # past its wrapper
    controller.checkpoint(force=True, wait=True)


def hold_restored_trial(trial) -> None:
    """Keep a restored PENDING trial from being started: called in a scheduler's
    `on_trial_add` (Tune files the trial under the status it has after that call), it
    waits PAUSED until the scheduler picks it in `choose_trial_to_run`, or stops it."""
    from ray.tune.experiment import Trial

    trial.set_status(Trial.PAUSED)


def forget_running_averages(trial) -> None:
    """Drop the recent values Tune keeps for an ended trial's running averages (its
    "last-5-avg" and "last-10-avg" figures stay, with min, max and last). Call it only
    once Tune has said the trial completed: another result would find no deque to append to."""
    trial.run_metadata.metric_n_steps = {}  # its setattr drops the cached JSON too


# Ray core's own setting (RayConfig `event_log_reporter_enabled`): see the docstring.
NO_WORKER_EVENT_FILES = {"RAY_event_log_reporter_enabled": "0"}

# Ray gives its head node this resource (Ray's HEAD_NODE_RESOURCE_NAME;
# Ray Train pins its state actor with it); no public option places an actor on the head.
# A several-worker trial's own actor asks for a sliver of it: that actor only waits on its
# TorchTrainer (whose workers hold the CPUs and GPUs), and on the head it does not die
# with a worker node, taking the trial's Train run with it.
ON_THE_HEAD_NODE = {"node:__internal_head__": 0.001}

# ---------------------------------------------------------------- Ray client


def ray_address_file():
    """The file in which `ray start` records the address that `ray.init("auto")` joins:
    `ray/ray_current_cluster` in Ray's temporary folder (RAY_TMPDIR, else TMPDIR, else
    /tmp on Linux), as Ray's own `get_ray_address_file` names it."""
    import tempfile
    from pathlib import Path

    system = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or (
        "/tmp" if os.name == "posix" else tempfile.gettempdir()
    )
    return Path(system) / "ray" / "ray_current_cluster"
