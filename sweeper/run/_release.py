"""Give back at once what a trial Tune is done with held on the cluster.

A Tune trial runs a Ray Train run whose placement group holds its workers' CPUs and GPUs
(sweeper/run/_trial.py). Tune does not know of that group: it reuses a paused or pruned
trial's actor for a later trial (`reuse_actors`), and while the actor waits in Tune's
cache, its Train run waits inside its last report with its workers alive, and the next
trial would wait for CPUs that nothing uses. Train's own cleaner only acts once the actor
process dies, by polling.

So the driver removes the group itself: each worker group's first report names its
placement group (trainables/worker.py); as Tune ends a trial (pruned, completed,
failed), and at the start of every step of Tune's loop, before Tune starts any trial,
for each trial that is paused, pruned, completed or failed, the group is removed and
the removal confirmed by the cluster. The run in the cached
actor is already over for Tune: resetting the actor for the next trial, or ending it,
ends that run, which finds its workers gone.

Only where Tune reuses trial actors (`release_callbacks`, `ray_adapter.reuse_trial_actors`):
otherwise Tune ends a stopped trial's actor, and Train's cleaner removes the group; removed
from here while the run's controller still lived, Train would retry the run in a new group
that nothing removes, and every later trial would wait for its CPUs."""

from __future__ import annotations

import logging

from ray.tune import Callback

from sweeper.cluster import release_placement_group
from trainables.metrics import PLACEMENT_GROUP

__all__ = ["ReleaseFinishedRuns", "release_callbacks"]

logger = logging.getLogger(__name__)

# Tune's statuses of a trial whose Train run has nothing more to do.
DONE_WITH = ("PAUSED", "TERMINATED", "ERROR")


class ReleaseFinishedRuns(Callback):
    """Tune callback on the driver: removes the placement group of every trial Tune is
    done with, before the next trial starts. `released` counts the groups removed."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}  # Tune trial id -> hex id of its run's placement group
        self.released = 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(PLACEMENT_GROUP):
            self.held[trial.trial_id] = result[PLACEMENT_GROUP]

    def on_step_begin(self, iteration, trials, **info):
        for trial in trials:
            if trial.status in DONE_WITH:
                self._release(trial.trial_id)

    # A stopped trial's actor may already run the next trial (Tune reuses it, resetting
    # it, before these two calls): that aborts the old run, and removing its group here
    # makes sure of it when the abort did not finish in Tune's reset time.
    def on_trial_complete(self, iteration, trials, trial, **info):
        self._release(trial.trial_id)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._release(trial.trial_id)

    def on_experiment_end(self, trials, **info):
        for trial_id in list(self.held):
            self._release(trial_id)

    def _release(self, trial_id: str) -> None:
        """Remove the trial's group, if it holds one not yet removed."""
        placement_group = self.held.pop(trial_id, None)
        if placement_group is None:
            return
        if release_placement_group(placement_group):
            self.released += 1
        else:
            logger.warning("placement group %s of trial %s was not removed in time", placement_group, trial_id)

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; a resumed driver's runs
        # are new runs with groups of their own.
        return {"held": {}, "released": 0}


def release_callbacks() -> list:
    """The sweep's release callback where Tune reuses trial actors, else none (see above)."""
    from sweeper.cluster.ray_adapter import reuse_trial_actors

    return [ReleaseFinishedRuns()] if reuse_trial_actors() else []
