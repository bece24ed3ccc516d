"""A node told it is about to be taken away (a spot or preemptible instance reclaimed;
`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`, as
the autoscaler drains one): the trials training there keep their work and move.

Ray Train 2.60 watches the cluster for such drains and tells every worker of a run with a
node being drained (`ray.train.get_preemption_info()`, the same answer on every worker: it
is a collective, so every worker asks after every optimizer step). Told, a trial's workers
save a checkpoint at once, at that optimizer step rather than at the next evaluation, and
then train no further on the doomed node: when the node goes, or at the drain's deadline,
Train ends the run with a PreemptionError and starts it again from that checkpoint on
another node (`FailureConfig.max_preemption_failures`, which does not use up
`search.max_failures`). So a preempted trial loses at most the step in flight, however far
its next evaluation was, and the time left until the deadline. Asking is a collective
call to Train's synchronization actor (milliseconds), so it is asked only where Train
watches for drains: a sweep that joined a cluster (sweeper/cluster/_connect.py), not a sweep's own local one.

The checkpoint is Train's own: its report carries PREEMPTION_CHECKPOINT, and the trial's
Train callback keeps it from Tune (it is not an evaluation; sweeper/run/_trial.py). The
restarted trial's reports carry PREEMPTIONS (how often it moved) and PREEMPTED_AT_STEP
(the step it moved at), which its MLflow run records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from trainables.common import Reporter, Workers, checkpoint_report, report_with_checkpoint
from trainables.environment import PREEMPTION_WATCHER_ENV
from trainables.metrics import PREEMPTED_AT_STEP, PREEMPTION_CHECKPOINT, PREEMPTIONS, STEP

__all__ = ["PreemptionNotice", "NO_NOTICE", "train_notice", "moves_of"]

# How often a worker that kept its work looks again while it waits to be moved (it is
# ended by Train, not by itself: a worker that returned would end the trial as finished).
WAIT_POLL_S = 1.0


class PreemptionNotice:
    """Asked by every worker after each optimizer step; `ask` is Ray Train's
    get_preemption_info (None outside a Train run: never told)."""

    def __init__(self, ask: Callable[[], object | None] | None, moves: dict[str, int] | None = None):
        self.ask = ask
        # PREEMPTIONS and PREEMPTED_AT_STEP of the run's earlier moves: the loops report them
        # at every evaluation, so that each checkpoint's report keeps the count.
        self.moves = moves or {}

    def arrived(self) -> bool:
        return self.ask is not None and self.ask() is not None

    def keep_and_wait(self, report: Reporter, step: int, strategy, workers: Workers) -> None:
        """Checkpoint `step` with the move counted (also after an evaluation's checkpoint
        of the same step: that one does not count it), then wait for Train to end this
        worker and start the run again elsewhere from it."""
        moved = {PREEMPTIONS: self.moves.get(PREEMPTIONS, 0) + 1, PREEMPTED_AT_STEP: step}
        report_with_checkpoint(report, {STEP: step, PREEMPTION_CHECKPOINT: 1, **moved}, strategy, workers)
        while True:
            time.sleep(WAIT_POLL_S)


# Outside Ray Train (a trial's loop run in one process: calibration, tests).
NO_NOTICE = PreemptionNotice(None)


def train_notice(moves: dict[str, int] | None = None) -> PreemptionNotice:
    """A Ray Train worker's notice: it asks Train after each step where Train watches for
    drains (a sweep that joined a cluster); where it does not (a sweep's own machine), it
    is never told and asks nothing, since each asking is a collective call."""
    import ray.train

    watched = os.environ.get(PREEMPTION_WATCHER_ENV, "1") != "0"
    return PreemptionNotice(ray.train.get_preemption_info if watched else None, moves)


def moves_of(checkpoint_dir: str) -> dict[str, int]:
    """PREEMPTIONS and PREEMPTED_AT_STEP as of a checkpoint: those of its report, a
    preemption checkpoint's or an evaluation's that carried them on; {} for a run never moved."""
    report = checkpoint_report(checkpoint_dir) or {}
    return {key: int(report[key]) for key in (PREEMPTIONS, PREEMPTED_AT_STEP) if key in report}
