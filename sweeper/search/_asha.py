"""ASHA by promotion: successive halving in which a trial waits at a rung until it ranks
among the best 1/eta there, instead of being judged the moment it arrives.

Ray's ASHAScheduler (and Optuna's SuccessiveHalvingPruner) decide on arrival, from the
trials recorded at the rung so far: the first arrival always goes on, the second goes on
if it beats the first, and so on. In a small sweep most trials are early arrivals, so such
a sweep trains several times the steps of the rung arithmetic (benchmarks/pruning.py
counts them). This is the promotion form of ASHA (Li et al., "A System for
Massively Parallel Hyperparameter Tuning", MLSys 2020, Algorithm 2):

- A trial that reaches a rung is ranked there. Of the n trials ranked at a rung, at most
  floor(n / eta) go on; whenever there is room, the best one waiting goes first.
- A trial with no room is paused: Tune stops it and gives its slot to another trial. Its
  checkpoint at the rung stays on disk; promoted later, it continues from it in a new
  Ray Train run (one trial setup per promotion).
- A rung closes when no trial can still arrive there (the search has suggested all its
  trials, and every trial below has arrived or ended). A sweep that runs until a budget
  cap has no trial count: its search ends when the cap's guard says no more trials
  (sweeper/budget/_guard.py), and until then no rung closes. Its quota is then
  max(1, floor(n / eta)), so that some trial always goes on, and the trials still
  waiting there are stopped: pruned at that rung.
- A waiting trial is stopped as soon as it can no longer go on: when at least as many
  trials rank above it as can ever go on from its rung (max(1, floor(m / eta)), m the
  most trials that can reach the rung). Hopeless trials so end, and reach the searcher
  as pruned, early instead of at the end of the sweep. Without a trial count m is
  unbounded, and a waiting trial is stopped only when its rung closes: the open-ended
  stream of asynchronous successive halving, where each new arrival at a rung may make
  room for one more of those waiting there.
- An unranked trial goes on from every rung without being ranked there, to max_steps:
  a repeat (a warm start's config that trains the very run an earlier sweep completed,
  sweeper/search/_warm_start.py: its full-length result is known, and ranking it on an early
  evaluation could prune the earlier best for a rival that leads early and ends worse),
  and the sweep's first `early_stopping.startup_trials` trials (full-length results for the
  search to learn from before early ranks decide, as Optuna's MedianPruner lets its
  first trials finish). The other trials' rungs are those of a sweep without them; each
  adds its own steps to max_steps to the rung arithmetic.

`RungLadder` is the rule, pure and tested without Ray; `PromotionASHA` applies it as a
Tune scheduler; `SlotLimiter` keeps the number of trials holding a slot at the plan's
concurrency while paused trials hold none.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from sweeper.plan import rung_quota
from sweeper.cluster.ray_adapter import hold_restored_trial

__all__ = ["RungLadder", "PromotionASHA", "SlotLimiter"]


@dataclass
class Rung:
    milestone: int
    # trial -> its score when it first reported at or past the milestone; lower is better
    scores: dict[str, float] = field(default_factory=dict)
    promoted: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)


class RungLadder:
    """Which trials go on from which rung. Scores are "lower is better" (the scheduler
    negates a metric to maximize); a non-finite score ranks last."""

    # The ladder's size after the last settle (see settle); a class default, so that a ladder
    # Tune pickled before this field existed loads with none.
    _settled: tuple | None = None

    def __init__(self, milestones: list[int], reduction_factor: float):
        self.rungs = [Rung(m) for m in milestones]
        self.reduction_factor = reduction_factor
        self.trials: set[str] = set()
        self.ended: set[str] = set()
        # Trials that go on to max_steps, never ranked, never waiting: repeats of completed
        # earlier runs and the sweep's startup trials.
        self.unranked: set[str] = set()
        # Promoted while paused, in promotion order: to be resumed when a slot is free.
        self.ready: list[str] = []

    def add(self, trial: str) -> None:
        self.trials.add(trial)

    def record(self, trial: str, step: int, score: float) -> None:
        """The trial reported `score` at `step`: it is ranked at the first rung it has
        reached and not been ranked at yet, and waits there until `settle` decides. An
        unranked trial goes on."""
        self.trials.add(trial)
        if trial in self.unranked:
            return
        for rung in self.rungs:
            if step < rung.milestone:
                break
            if trial not in rung.scores:
                rung.scores[trial] = score if math.isfinite(score) else math.inf
                rung.waiting.add(trial)
                return

    def waiting_at(self, trial: str) -> int | None:
        """Index of the rung where the trial waits, or None."""
        for index, rung in enumerate(self.rungs):
            if trial in rung.waiting:
                return index
        return None

    def end(self, trial: str) -> None:
        """The trial trains no more (completed, stopped or failed)."""
        self.ended.add(trial)
        for rung in self.rungs:
            rung.waiting.discard(trial)
        if trial in self.ready:
            self.ready.remove(trial)

    def replay(self, trial: str, reports: list[tuple[int, float]], ended: bool) -> None:
        """Rebuild a trial's place from its reports (step, score), for `sweep resume`:
        it went on from a rung if it reported past the step where it was ranked there."""
        self.trials.add(trial)
        steps = [step for step, _ in reports]
        for rung in self.rungs if trial not in self.unranked else ():
            arrival = next(((s, v) for s, v in reports if s >= rung.milestone), None)
            if arrival is None:
                break
            rung.scores[trial] = arrival[1] if math.isfinite(arrival[1]) else math.inf
            if max(steps) > arrival[0]:
                rung.promoted.add(trial)
            else:
                rung.waiting.add(trial)
                break
        if ended:
            self.end(trial)

    def settle(self, num_trials: int | None) -> tuple[list[str], list[str]]:
        """Fill every rung's quota with its best waiting trials, and stop the waiting
        trials that can no longer go on: those at a closed rung, and those with at least
        as many better trials at their rung as the most that can ever go on from it.
        `num_trials` is the most trials the sweep will have (None: no bound yet, trials
        keep coming until a budget cap ends the search). Returns (promoted, stopped),
        each in decision order; promoted trials are also queued in `ready` (the caller
        takes out a trial that is running, not paused)."""
        # Tune's loop settles at every step, and sorting rungs of thousands of trials each
        # time slowed a large sweep. Every change a decision depends on grows one of the sets
        # sized here (a waiting trial arrives with its score and leaves by promotion or by
        # ending), so an unchanged size means an unchanged ladder, already settled.
        if self._size(num_trials) == self._settled:
            return [], []
        promoted, stopped = [], []
        search_done = num_trials is not None and len(self.trials) >= num_trials
        # The most trials that can ever be ranked at the rung: at the first, all but
        # unranked ones and those that ended before it; at the next, the most that can go on
        # from this one. Unbounded (math.inf) while the number of trials is.
        ended_ranked = self.ended - self.unranked
        most_ranked = (
            math.inf if num_trials is None
            else num_trials - len(self.unranked) - sum(1 for t in ended_ranked if not any(t in r.scores for r in self.rungs))
        )
        for index, rung in enumerate(self.rungs):
            closed = self._closed(index, search_done)
            quota = rung_quota(len(rung.scores), self.reduction_factor)
            if closed and rung.scores:
                quota = max(1, quota)
            while len(rung.promoted) < quota and rung.waiting:
                best = min(rung.waiting, key=lambda t: (rung.scores[t], t))
                rung.waiting.remove(best)
                rung.promoted.add(best)
                promoted.append(best)
                self.ready.append(best)
            most_promoted = math.inf if most_ranked == math.inf else max(1, rung_quota(most_ranked, self.reduction_factor))
            rank = {t: i for i, t in enumerate(sorted(rung.scores, key=lambda t: (rung.scores[t], t)))}
            for trial in sorted(rung.waiting, key=rank.get):
                if closed or rank[trial] >= most_promoted:
                    stopped.append(trial)
                    self.end(trial)
            most_ranked = most_promoted
        self._settled = self._size(num_trials)
        return promoted, stopped

    def _size(self, num_trials: int | None) -> tuple:
        return (
            num_trials, len(self.trials), len(self.ended), len(self.unranked),
            *((len(r.scores), len(r.promoted), len(r.waiting)) for r in self.rungs),
        )

    def _closed(self, index: int, search_done: bool) -> bool:
        """No trial can still arrive at this rung."""
        if not search_done:
            return False
        rung = self.rungs[index]
        if index == 0:
            return all(t in self.ended or t in rung.scores for t in self.trials - self.unranked)
        below = self.rungs[index - 1]
        return (
            self._closed(index - 1, search_done)
            and not below.waiting
            and all(t in self.ended or t in rung.scores for t in below.promoted)
        )

class PromotionASHA(FIFOScheduler):
    """The Tune scheduler: ranks trials at their rungs, pauses those without room, resumes
    promoted ones as slots free up (before any new trial is suggested: see SlotLimiter),
    and stops those left waiting at a closed rung.

    `slots` is the plan's concurrency; `num_trials` the most trials (None: until a budget
    cap ends the search). `book` (sweeper.track._book.SweepBook) holds the
    reports of trials a resumed sweep restores; see `for_resume`."""

    def __init__(
        self,
        *,
        metric: str,
        mode: str,
        time_attr: str,
        milestones: list[int],
        reduction_factor: float,
        num_trials: int | None,
        slots: int,
    ):
        super().__init__()
        self._metric, self._mode, self._time_attr = metric, mode, time_attr
        self._milestones, self._reduction_factor = milestones, reduction_factor
        self.num_trials, self.slots = num_trials, slots
        self._restored_reports: dict[str, list[tuple[int, float]]] = {}
        self._restored_finished: set[str] = set()
        self._reset()

    def _reset(self) -> None:
        self.ladder = RungLadder(self._milestones, self._reduction_factor)
        # Trials holding a slot: started or about to start, neither paused nor ended.
        self.holding_slot: set[str] = set()
        # Stopped by the ladder while Tune was still pausing them (it saves first).
        self._stop_once_paused: set[str] = set()
        self._settling = False

    def for_resume(self, book) -> None:
        """Before a restored Tune run adds its trials: forget the state pickled with the
        tuner and rebuild each trial's rungs from the reports in `book`."""
        self._reset()
        self._restored_reports = {
            trial_id: [(report["step"], self._score(report[self._metric])) for report in record.history if self._metric in report]
            for trial_id, record in book.trials.items()
        }
        # Ended by the last driver after Tune last saved its state (it was killed).
        self._restored_finished = {trial_id for trial_id, record in book.trials.items() if record.finished}

    def mark_unranked(self, trial_ids) -> None:
        """These trials go on from every rung to max_steps (repeats, startup trials)."""
        self.ladder.unranked.update(trial_ids)

    def _score(self, value: float) -> float:
        return value if self._mode == "min" else -value

    # ------------------------------------------------------------ Tune's events

    def on_trial_add(self, tune_controller, trial: Trial) -> None:
        trial_id = trial.trial_id
        if trial_id not in self._restored_reports:
            self.ladder.add(trial_id)
            self.holding_slot.add(trial_id)
            return
        ended_in_tune = trial.status in (Trial.TERMINATED, Trial.ERROR)
        ended = ended_in_tune or trial_id in self._restored_finished
        self.ladder.replay(trial_id, self._restored_reports.pop(trial_id), ended)
        if ended_in_tune:
            return
        if ended:
            self._stop_once_paused.add(trial_id)
        elif self.ladder.waiting_at(trial_id) is None:
            self.ladder.ready.append(trial_id)
        # Restored unfinished trials come back PENDING, and Tune starts every pending
        # trial at once: held, they wait for a slot (choose_trial_to_run) or promotion,
        # and a trial the last driver ended is stopped.
        hold_restored_trial(trial)

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        if self._metric not in result or self._time_attr not in result:
            return TrialScheduler.CONTINUE
        trial_id = trial.trial_id
        if trial_id in self.ladder.ended:  # stopped while its pause was under way
            return TrialScheduler.STOP
        self.ladder.record(trial_id, result[self._time_attr], self._score(result[self._metric]))
        stopped = self._settle(tune_controller, arriving=trial_id)
        if trial_id in stopped:
            return TrialScheduler.STOP
        if self.ladder.waiting_at(trial_id) is not None:
            self.holding_slot.discard(trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict) -> None:
        self._ended(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial: Trial) -> None:
        self._ended(tune_controller, trial)

    def on_trial_remove(self, tune_controller, trial: Trial) -> None:
        self._ended(tune_controller, trial)

    def _ended(self, tune_controller, trial: Trial) -> None:
        self.ladder.end(trial.trial_id)
        self.holding_slot.discard(trial.trial_id)
        self._settle(tune_controller)

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        """A promoted paused trial, when a slot is free; new trials start on their own
        once SlotLimiter lets the searcher suggest them."""
        self._settle(tune_controller)
        if len(self.holding_slot) >= self.slots or not self.ladder.ready:
            return None
        paused = {t.trial_id: t for t in tune_controller.get_trials() if t.status == Trial.PAUSED}
        for trial_id in self.ladder.ready:
            if trial_id in paused:
                self.ladder.ready.remove(trial_id)
                self.holding_slot.add(trial_id)
                return paused[trial_id]
        return None

    def admits_new_trial(self) -> bool:
        """Whether the searcher may suggest a trial now: a slot is free and no promoted
        trial is waiting for one."""
        return len(self.holding_slot) < self.slots and not self.ladder.ready

    def _settle(self, tune_controller, arriving: str | None = None) -> list[str]:
        """Apply the ladder's decisions to the trials other than `arriving` (which gets
        its decision as on_trial_result's return value); returns the stopped trials."""
        if self._settling:  # stop_trial below calls back into on_trial_remove
            return []
        self._settling = True
        try:
            # A search that ends early (a grid smaller than num_trials, a budget cap) has all its trials.
            finished = tune_controller.search_alg.is_finished()
            promoted, stopped = self.ladder.settle(len(self.ladder.trials) if finished else self.num_trials)
            if arriving in promoted:  # it is running: it goes on without a pause
                self.ladder.ready.remove(arriving)
            # A trial Tune is still pausing (saving it first) is stopped once paused.
            self._stop_once_paused.update(set(stopped) - {arriving})
            for trial in tune_controller.get_trials() if self._stop_once_paused else ():
                if trial.trial_id in self._stop_once_paused and trial.status == Trial.PAUSED:
                    self._stop_once_paused.discard(trial.trial_id)
                    tune_controller.stop_trial(trial)
            return stopped
        finally:
            self._settling = False

    def debug_string(self) -> str:
        rungs = ", ".join(f"{r.milestone}: {len(r.promoted)}/{len(r.scores)} on" for r in self.ladder.rungs)
        return f"ASHA by promotion (eta {self._reduction_factor:g}); rungs {rungs}"


class SlotLimiter(ConcurrencyLimiter):
    """Ray's ConcurrencyLimiter counts a paused trial as running until it completes, so
    two paused trials would stop a 2-slot sweep from suggesting more. This one asks the
    scheduler, which counts only the trials holding a slot and first resumes promoted
    ones. Being a ConcurrencyLimiter, Tune also sizes its pending-trial queue by it."""

    def __init__(self, searcher: Searcher, scheduler: PromotionASHA):
        super().__init__(searcher, max_concurrent=scheduler.slots)
        self.scheduler = scheduler

    def get_state(self) -> dict:
        """Tune saves this with the experiment and restores it on `sweep resume`: without
        the scheduler, which Ray's version would deep-copy and, restored, put in place of
        the live one (the limiter then asked a stale copy, and a resumed sweep stalled)."""
        return copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in ("searcher", "scheduler")})

    def set_state(self, state: dict) -> None:
        self.__dict__.update({k: v for k, v in state.items() if k != "scheduler"})

    def suggest(self, trial_id: str) -> dict | None:
        if not self.scheduler.admits_new_trial():
            return None
        suggestion = self.searcher.suggest(trial_id)
        if suggestion not in (None, Searcher.FINISHED):
            self.live_trials.add(trial_id)
            self.num_unfinished_live_trials += 1
            if trial_id in getattr(self.searcher, "unranked", ()):  # a Tune searcher not ours has none
                self.scheduler.mark_unranked([trial_id])
        return suggestion
