"""ASHA by promotion: the rung rule (RungLadder) and the scheduler driven through a small
stand-in for Tune's controller (statuses, pause, stop, resume), no Ray cluster."""

from __future__ import annotations

import math
import random
import time
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import TrialScheduler

from sweeper.plan._rungs import promotion_steps
from sweeper.search._asha import PromotionASHA, RungLadder


def test_a_rung_promotes_one_in_eta_and_the_best_waiting_first():
    ladder = RungLadder([10, 30], reduction_factor=3)
    for trial, score in [("a", 5.0), ("b", 3.0)]:
        ladder.record(trial, 10, score)
        assert ladder.settle(num_trials=100) == ([], [])  # 1 or 2 ranked: no room yet
    ladder.record("c", 10, 4.0)
    assert ladder.settle(num_trials=100) == (["b"], [])  # the best waiting, not the arrival
    assert ladder.ready == ["b"]
    for trial, score in [("d", 1.0), ("e", 9.0), ("f", 8.0)]:
        ladder.record(trial, 10, score)
    assert ladder.settle(num_trials=100) == (["d"], [])  # 6 ranked: 2 go on
    assert ladder.waiting_at("a") == 0 and ladder.waiting_at("b") is None


def test_a_closed_rung_lets_one_go_on_and_stops_the_rest():
    """Fewer trials than eta: without closing, none would ever complete."""
    ladder = RungLadder([10, 30], reduction_factor=3)
    ladder.record("a", 10, 2.0)
    ladder.record("b", 10, 1.0)
    assert ladder.settle(num_trials=2) == (["b"], ["a"])
    assert "a" in ladder.ended
    # Rung 30 closes only once b has arrived there (or ended).
    assert ladder.settle(num_trials=2) == ([], [])
    ladder.record("b", 30, 0.5)
    assert ladder.settle(num_trials=2) == (["b"], [])


def test_a_rung_stays_open_while_a_trial_can_still_arrive():
    ladder = RungLadder([10], reduction_factor=3)
    for trial in "abc":
        ladder.add(trial)
    ladder.record("a", 10, 2.0)
    ladder.record("b", 10, 1.0)
    assert ladder.settle(num_trials=3) == ([], ["a"])  # a can never go on: b is better
    assert ladder.waiting_at("b") == 0  # c is still training towards 10
    ladder.end("c")  # failed before the rung
    assert ladder.settle(num_trials=3) == (["b"], [])


def test_a_screen_sends_the_best_quarter_to_the_end_and_stops_the_rest():
    """early_stopping.rungs: 1, reduction_factor: 4 on 8 trials: one rung, floor(8/4) = 2 go on
    from it to max_steps; a trial with 2 better ones at the rung can never go on."""
    ladder = RungLadder([10], reduction_factor=4)
    for trial, score in zip("abcdefgh", [5.0, 3.0, 7.0, 1.0, 6.0, 8.0, 2.0, 4.0]):
        ladder.record(trial, 10, score)
    promoted, stopped = ladder.settle(num_trials=8)
    assert promoted == ["d", "g"]  # 1.0 and 2.0, best first
    assert sorted(stopped) == ["a", "b", "c", "e", "f", "h"] and not ladder.rungs[0].waiting
    ladder.record("d", 90, 0.5)  # past the last rung: trains on, ranked nowhere else
    assert ladder.settle(num_trials=8) == ([], [])


def test_a_trial_that_can_no_longer_go_on_is_stopped_early():
    """9 trials, eta 3: at most 3 go on from the first rung, at most 1 from the second."""
    ladder = RungLadder([10, 30], reduction_factor=3)
    for trial, score in [("a", 1.0), ("b", 2.0), ("c", 3.0)]:
        ladder.record(trial, 10, score)
    assert ladder.settle(num_trials=9) == (["a"], [])
    ladder.record("d", 10, 4.0)  # 3 ranked above it, and 3 at most go on
    assert ladder.settle(num_trials=9) == ([], ["d"])
    assert ladder.waiting_at("b") == ladder.waiting_at("c") == 0
    ladder.record("a", 30, 0.5)
    assert ladder.settle(num_trials=9) == ([], [])  # alone at 30, and more may come
    ladder.record("e", 10, 0.1)
    ladder.record("f", 10, 0.2)  # 6 ranked: e goes on, f waits, b and c rank 4th and 5th
    assert ladder.settle(num_trials=9) == (["e"], ["b", "c"])
    assert ladder.waiting_at("f") == 0
    ladder.record("e", 30, 0.4)  # better than a at 30, where 1 at most goes on
    assert ladder.settle(num_trials=9) == ([], ["a"])


def test_non_finite_scores_rank_last():
    ladder = RungLadder([10], reduction_factor=3)
    for trial, score in [("a", math.nan), ("b", 7.0), ("c", math.inf)]:
        ladder.record(trial, 10, score)
    assert ladder.settle(num_trials=100) == (["b"], [])


@pytest.mark.parametrize("num_trials", [24, None])
def test_settling_an_unchanged_ladder_again_decides_what_settling_from_scratch_would(num_trials):
    """settle skips a ladder whose size has not changed since it last settled (Tune settles at
    every loop step). Fed the same random arrivals, ends and unranked trials, a ladder that
    always settles in full decides exactly the same, settle by settle."""
    rng = random.Random(7)
    skipping, full = RungLadder([2, 6, 18], 3), RungLadder([2, 6, 18], 3)
    steps: dict[str, int] = {}
    for _ in range(400):
        op = rng.random()
        trial = f"t{rng.randrange(24)}"
        for ladder in (skipping, full):
            if op < 0.05:
                ladder.unranked.add(trial)
            elif op < 0.15:
                ladder.end(trial)
            elif op < 0.25:
                ladder.add(trial)
        if 0.25 <= op < 0.75 and trial not in full.ended and full.waiting_at(trial) is None:
            steps[trial] = steps.get(trial, 0) + rng.choice([2, 4])
            score = rng.choice([rng.random(), math.nan])
            for ladder in (skipping, full):
                ladder.record(trial, steps[trial], score)
        full._settled = None
        assert skipping.settle(num_trials) == full.settle(num_trials)
        assert skipping.ready == full.ready and skipping.ended == full.ended


def test_replay_rebuilds_rungs_from_reports():
    ladder = RungLadder([10, 30], reduction_factor=3)
    ladder.replay("went_on", [(10, 2.0), (20, 1.5), (30, 1.0)], ended=False)
    ladder.replay("waits", [(10, 3.0)], ended=False)
    ladder.replay("pruned", [(10, 4.0)], ended=True)
    assert ladder.rungs[0].promoted == {"went_on"}
    assert ladder.waiting_at("went_on") == 1
    assert ladder.waiting_at("waits") == 0
    assert ladder.waiting_at("pruned") is None and ladder.rungs[0].scores["pruned"] == 4.0


# ---------------------------------------------------------------- the scheduler in a loop


class FakeTune:
    """What the scheduler sees of Tune's controller, and a loop that runs trials: each
    running trial reports at every eval step; PAUSE stops it (it continues from that
    step when resumed), STOP ends it. As in Tune, a pause takes effect a little later
    (Tune saves the trial first): the trial stays RUNNING, reporting nothing, while other
    trials report."""

    def __init__(self, scheduler: PromotionASHA, num_trials: int, eval_every: int, max_steps: int, score):
        self.scheduler, self.num_trials = scheduler, num_trials
        self.eval_every, self.max_steps, self.score = eval_every, max_steps, score
        self.trials: list = []
        self.steps_trained = 0
        self.most_running = 0
        self.search_alg = SimpleNamespace(is_finished=lambda: len(self.trials) >= self.num_trials)

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        assert trial.status in ("PAUSED", "PENDING")
        trial.status = "TERMINATED"
        self.scheduler.on_trial_remove(self, trial)

    def run(self, max_rounds: int = 10_000) -> None:
        for _ in range(max_rounds):
            if len(self.trials) < self.num_trials and self.scheduler.admits_new_trial():
                trial = SimpleNamespace(trial_id=f"t{len(self.trials)}", status="RUNNING", step=0)
                self.trials.append(trial)
                self.scheduler.on_trial_add(self, trial)
            for trial in self.trials:
                if getattr(trial, "pausing", 0):
                    trial.pausing -= 1
                    if not trial.pausing:
                        trial.status = "PAUSED"
            resumed = self.scheduler.choose_trial_to_run(self)
            if resumed is not None:
                resumed.status = "RUNNING"
            running = [t for t in self.trials if t.status == "RUNNING" and not getattr(t, "pausing", False)]
            self.most_running = max(self.most_running, len(running))
            if not running and resumed is None and not any(getattr(t, "pausing", False) for t in self.trials):
                if all(t.status == "TERMINATED" for t in self.trials) and len(self.trials) == self.num_trials:
                    return
                if not self.scheduler.admits_new_trial():
                    raise AssertionError(f"stuck: {[(t.trial_id, t.status, t.step) for t in self.trials]}")
            for trial in running[:1]:  # one report per round, in turn
                trial.step += self.eval_every
                self.steps_trained += self.eval_every
                result = {"step": trial.step, "eval_loss": self.score(trial)}
                decision = self.scheduler.on_trial_result(self, trial, result)
                if decision == TrialScheduler.PAUSE:
                    trial.pausing = 3  # rounds: other trials report meanwhile
                elif decision == TrialScheduler.STOP or trial.step >= self.max_steps:
                    trial.status = "TERMINATED"
                    self.scheduler.on_trial_complete(self, trial, result)
                self.trials.remove(trial)  # the next round serves another trial first
                self.trials.append(trial)
        raise AssertionError("did not finish")


def scheduler(num_trials: int | None, slots: int) -> PromotionASHA:
    return PromotionASHA(
        metric="eval_loss", mode="min", time_attr="step", milestones=[10, 30],
        reduction_factor=3, num_trials=num_trials, slots=slots,
    )


@pytest.mark.parametrize("num_trials", [1, 2, 5, 9, 27])
def test_a_sweep_trains_the_rung_arithmetic_and_finishes(num_trials):
    """Quality grows with the trial number (as TPE's later trials tend to), the case
    where deciding on arrival lets the most trials through."""
    sched = scheduler(num_trials, slots=2)
    tune = FakeTune(sched, num_trials, eval_every=10, max_steps=90, score=lambda t: 10 - int(t.trial_id[1:]) * 0.1)
    tune.run()
    completed = [t for t in tune.trials if t.step == 90]
    assert len(completed) >= 1
    assert tune.most_running <= 2
    assert tune.steps_trained <= 1.3 * max(promotion_steps(num_trials, grace_period=10, max_steps=90, reduction_factor=3), 90)
    # The best trial (the last one) is the one that trains to the end.
    assert tune.trials[-1].step == 90 or any(t.trial_id == f"t{num_trials - 1}" for t in completed)


def test_nine_trials_train_exactly_the_rung_arithmetic():
    sched = scheduler(9, slots=2)
    tune = FakeTune(sched, 9, eval_every=10, max_steps=90, score=lambda t: 10 - int(t.trial_id[1:]) * 0.1)
    tune.run()
    assert tune.steps_trained == promotion_steps(9, grace_period=10, max_steps=90, reduction_factor=3) == 210
    assert sorted(t.step for t in tune.trials) == [10] * 6 + [30] * 2 + [90]


def test_startup_trials_train_to_the_end_and_the_others_follow_the_ladder_without_them():
    """early_stopping.startup_trials 2 of 11: the first two train to max_steps although
    they are the worst at every rung; the other 9 are promoted as 9 trials are."""
    from sweeper.plan._rungs import milestone_counts, steps_trained

    sched = scheduler(11, slots=2)
    sched.mark_unranked(["t0", "t1"])
    tune = FakeTune(sched, 11, eval_every=10, max_steps=90, score=lambda t: 10 - int(t.trial_id[1:]) * 0.1)
    tune.run()
    steps = {t.trial_id: t.step for t in tune.trials}
    assert steps["t0"] == steps["t1"] == 90 and steps["t10"] == 90
    assert sorted(steps.values()) == [10] * 6 + [30] * 2 + [90] * 3
    assert tune.steps_trained == steps_trained(milestone_counts(11, [10, 30], 90, 3, startup_trials=2)) == 390


@pytest.mark.parametrize("num_trials", [2, 5, 10, 27, 54])
def test_noisy_scores_and_slow_pauses_always_finish_within_the_budget(num_trials):
    """A trial can be stopped while Tune is still pausing it (found by a 54-trial sweep
    that hung with one trial paused for good); scores arrive in any order."""
    import random

    for seed in range(20):
        rng = random.Random(seed)
        quality: dict[str, float] = {}

        def score(trial):
            base = quality.setdefault(trial.trial_id, rng.random() * 5)
            return base - trial.step * 0.01 + rng.random() * 0.3

        sched = scheduler(num_trials, slots=2)
        tune = FakeTune(sched, num_trials, eval_every=10, max_steps=90, score=score)
        tune.run()
        assert all(t.status == "TERMINATED" for t in tune.trials)
        budget = sum(n * (m - previous) for (m, n), previous in zip(
            [(10, num_trials), (30, max(1, num_trials // 3)), (90, max(1, num_trials // 9))], [0, 10, 30]))
        assert tune.steps_trained <= budget, seed


def test_for_resume_pauses_restored_trials_until_a_slot_is_free():
    from sweeper.track._book import SweepBook, TrialRecord

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    histories = {
        "done": [{"step": 10, "eval_loss": 3.0}],
        "waiting": [{"step": 10, "eval_loss": 2.0}],
        "on_its_way": [{"step": 10, "eval_loss": 1.0}, {"step": 20, "eval_loss": 0.9}],
        "mid_rung": [],
    }
    for number, (trial_id, history) in enumerate(histories.items(), start=1):
        book.trials[trial_id] = TrialRecord(trial_id=trial_id, number=number, params={}, history=history)
    sched = scheduler(num_trials=4, slots=1)
    sched.for_resume(book)
    tune = FakeTune(sched, 4, eval_every=10, max_steps=90, score=lambda t: 1.0)
    for trial_id in histories:
        status = "TERMINATED" if trial_id == "done" else "PENDING"
        trial = SimpleNamespace(trial_id=trial_id, status=status, step=0, set_status=None)
        trial.set_status = lambda s, trial=trial: setattr(trial, "status", s)
        tune.trials.append(trial)
        sched.on_trial_add(tune, trial)
    assert [t.status for t in tune.trials] == ["TERMINATED", "PAUSED", "PAUSED", "PAUSED"]
    assert sched.ladder.waiting_at("waiting") == 0
    first = sched.choose_trial_to_run(tune)
    assert first is not None and first.trial_id in ("on_its_way", "mid_rung")
    first.status = "RUNNING"
    assert sched.choose_trial_to_run(tune) is None  # one slot
    assert not sched.admits_new_trial()


# ---------------------------------------------------------------- wiring from the plan


def plan_for(scheduler: str, parameters: bool = True):
    from sweeper.plan._sweep_plan import ClusterResources, make_plan
    from sweeper.spec._load import validate_spec
    from tests.conftest import REPO, small_sweep

    search = {"num_trials": 9} if parameters else {"num_trials": 1, "parameters": {}}
    raw = small_sweep("x", search=search, training={"max_steps": 90, "eval_every": 10},
                      early_stopping={"scheduler": scheduler, "grace_period": 10, "reduction_factor": 3})
    return make_plan(validate_spec(raw, base_dir=REPO), ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0))


def test_asha_is_by_promotion_with_the_plans_rungs_and_slots(tmp_path):
    from sweeper.search._asha import SlotLimiter
    from sweeper.search._searcher import make_search

    search_alg, sched, max_concurrent = make_search(plan_for("asha"), tmp_path)
    assert isinstance(sched, PromotionASHA) and isinstance(search_alg, SlotLimiter)
    assert [r.milestone for r in sched.ladder.rungs] == [10]  # one rung by default (early_stopping.rungs)
    assert (sched.slots, sched.num_trials, max_concurrent) == (2, 9, None)
    assert search_alg.scheduler is sched


def test_asha_stopping_and_a_fixed_config_get_rays_asha(tmp_path):
    from ray.tune.schedulers import ASHAScheduler

    from sweeper.search._searcher import make_search

    _, sched, max_concurrent = make_search(plan_for("asha_stopping"), tmp_path / "a")
    assert isinstance(sched, ASHAScheduler) and max_concurrent == 2
    search_alg, sched, _ = make_search(plan_for("asha", parameters=False), tmp_path / "b")
    assert search_alg is None and isinstance(sched, ASHAScheduler)


def test_the_limiter_asks_the_scheduler_for_a_slot():
    from ray.tune.search import Searcher

    from sweeper.search._asha import SlotLimiter

    class OneConfig(Searcher):
        def suggest(self, trial_id):
            return {"lr": 0.1}

    sched = scheduler(num_trials=9, slots=1)
    limiter = SlotLimiter(OneConfig(metric="eval_loss", mode="min"), sched)
    assert limiter.suggest("t0") == {"lr": 0.1}
    sched.on_trial_add(None, SimpleNamespace(trial_id="t0", status="PENDING"))
    assert limiter.suggest("t1") is None  # the one slot is taken
    sched.holding_slot.discard("t0")  # t0 paused at a rung
    assert limiter.suggest("t1") == {"lr": 0.1}
    sched.ladder.ready.append("t0")  # t0 promoted: it gets the next slot, not a new trial
    sched.holding_slot.clear()
    assert limiter.suggest("t2") is None


def test_the_limiters_saved_state_leaves_the_live_scheduler_in_place():
    """Tune saves the searcher's state and restores it on resume; a restored copy of the
    scheduler in the limiter stalled a resumed sweep (the limiter asked the stale copy)."""
    from ray.tune.search import Searcher

    from sweeper.search._asha import SlotLimiter

    class OneConfig(Searcher):
        def suggest(self, trial_id):
            return {"lr": 0.1}

    live = scheduler(num_trials=9, slots=2)
    limiter = SlotLimiter(OneConfig(metric="eval_loss", mode="min"), live)
    limiter.suggest("t0")
    state = limiter.get_state()
    assert "scheduler" not in state and state["live_trials"] == {"t0"}
    limiter.set_state({**state, "scheduler": scheduler(num_trials=9, slots=0)})  # as older checkpoints hold
    assert limiter.scheduler is live


def test_for_resume_stops_a_trial_the_last_driver_ended_after_tune_saved():
    """A driver killed after pruning a paused trial, before Tune saved its state: Tune
    brings the trial back unfinished, the book (MLflow) has it pruned."""
    from sweeper.track._book import SweepBook, TrialRecord

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    book.trials["pruned"] = TrialRecord("pruned", 1, {}, state="pruned", history=[{"step": 10, "eval_loss": 5.0}])
    sched = scheduler(num_trials=3, slots=2)
    sched.for_resume(book)
    tune = FakeTune(sched, 3, eval_every=10, max_steps=90, score=lambda t: 1.0)
    trial = SimpleNamespace(trial_id="pruned", status="PENDING", step=10)
    trial.set_status = lambda status: setattr(trial, "status", status)
    tune.trials.append(trial)
    sched.on_trial_add(tune, trial)
    assert trial.status == "PAUSED" and "pruned" in sched.ladder.ended
    assert sched.choose_trial_to_run(tune) is None
    assert trial.status == "TERMINATED"  # stopped, not resumed


def test_a_repeat_goes_on_unranked_and_the_others_rungs_are_those_of_a_sweep_without_it():
    """10 trials, eta 3, one of them a repeat of a completed earlier run (warm start): it
    never waits, even behind better trials, and the 9 others are promoted as 9 trials
    are (3 from the first rung), the rung closing once they have all arrived."""
    ladder = RungLadder([10, 30], reduction_factor=3)
    ladder.unranked.add("repeat")
    for trial in ["repeat", *"abcdefghi"]:
        ladder.add(trial)
    ladder.record("repeat", 10, 9.0)  # worst at step 10
    for trial, score in zip("abcdefghi", range(1, 10)):
        ladder.record(trial, 10, float(score))
    promoted, stopped = ladder.settle(num_trials=10)
    assert sorted(promoted) == ["a", "b", "c"] and sorted(stopped) == list("defghi")
    assert ladder.waiting_at("repeat") is None and "repeat" not in ladder.rungs[0].scores
    ladder.record("repeat", 30, 5.0)  # still running: rung 30 closes without it
    for trial, score in zip("abc", (3.0, 2.0, 1.0)):
        ladder.record(trial, 30, score)
    assert ladder.settle(num_trials=10) == (["c"], ["b", "a"])
    assert ladder.waiting_at("repeat") is None and "repeat" not in ladder.ended


def test_without_a_trial_count_a_waiting_trial_waits_for_more_arrivals():
    """A sweep that runs until a budget cap: no trial is hopeless while more can arrive;
    each arrival at a rung can make room, and the rung closes when the search ends."""
    ladder = RungLadder([10], reduction_factor=3)
    ladder.record("a", 10, 2.0)
    ladder.record("b", 10, 1.0)
    assert ladder.settle(num_trials=3) == ([], ["a"])  # with a count of 3, a can never go on
    ladder = RungLadder([10], reduction_factor=3)
    ladder.record("a", 10, 2.0)
    ladder.record("b", 10, 1.0)
    assert ladder.settle(num_trials=None) == ([], [])  # open-ended: both wait
    for trial, score in [("c", 3.0), ("d", 4.0), ("e", 5.0), ("f", 6.0)]:
        ladder.record(trial, 10, score)
    assert ladder.settle(num_trials=None) == (["b", "a"], [])  # 6 ranked: 2 go on
    # The search ended (the scheduler passes the trials there are): the rung closes.
    assert ladder.settle(num_trials=len(ladder.trials)) == ([], ["c", "d", "e", "f"])


@pytest.mark.parametrize("num_trials", [1, 5, 9, 27])
def test_an_open_ended_stream_trains_the_rung_arithmetic_of_the_trials_it_got(num_trials):
    """The scheduler without a trial count; the search (here FakeTune's) ends after
    `num_trials`, as a budget's guard ends it: the sweep finishes, nothing is stuck, and
    it trains within the rung arithmetic of the trials that ran."""
    import random

    for seed in range(10):
        rng = random.Random(seed)
        quality: dict[str, float] = {}

        def score(trial):
            return quality.setdefault(trial.trial_id, rng.random() * 5) - trial.step * 0.01

        sched = scheduler(None, slots=2)
        tune = FakeTune(sched, num_trials, eval_every=10, max_steps=90, score=score)
        tune.run()
        assert all(t.status == "TERMINATED" for t in tune.trials) and any(t.step == 90 for t in tune.trials)
        assert tune.steps_trained <= promotion_steps(num_trials, grace_period=10, max_steps=90, reduction_factor=3)


# ---------------------------------------------------------------- Tune's state saved first


class SavingController:
    """What a scheduler is handed (Tune's wrapper around its controller) and the saves asked of it."""

    def __init__(self):
        self._tune_controller = self
        self.saves: list[dict] = []
        self.search_alg = SimpleNamespace(is_finished=lambda: False)

    def checkpoint(self, force: bool = False, wait: bool = False) -> None:
        self.saves.append({"force": force, "wait": wait})
        time.sleep(0.001)  # a save takes some time

    def get_trials(self):
        return []


@pytest.mark.parametrize("kind", ["asha", "asha_stopping", "median", "none"])
def test_every_scheduler_saves_tunes_state_before_new_trials_start(kind, tmp_path):
    """A trial added by the search is in Tune's saved state before any trial is chosen to
    run (one save for the trials added in one loop step); a restored trial that had
    reported adds no save."""
    from ray.tune.experiment import Trial

    from sweeper.search._searcher import make_search
    from sweeper.search._tune_state import NewTrialsSavedFirst

    _, sched, _ = make_search(plan_for(kind), tmp_path)
    assert isinstance(sched, NewTrialsSavedFirst)
    tune = SavingController()
    for trial_id in ("t0", "t1"):
        sched.on_trial_add(tune, Trial("demo", trial_id=trial_id, stub=True))
    assert tune.saves == []  # added, not yet started: Tune asks the scheduler first
    sched.choose_trial_to_run(tune)
    assert tune.saves == [{"force": True, "wait": True}]
    sched.choose_trial_to_run(tune)
    assert len(tune.saves) == 1  # nothing new since
    restored = Trial("demo", trial_id="t2", stub=True)
    restored.update_last_result({"step": 10, "eval_loss": 2.0, "training_iteration": 1})
    sched.on_trial_add(tune, restored)
    sched.choose_trial_to_run(tune)
    assert len(tune.saves) == 1


def test_saves_stop_while_they_would_take_more_than_their_share_of_the_time(tmp_path, monkeypatch):
    """A save's cost grows with the sweep: once saving has taken more than SAVE_SHARE of the
    time, new trials wait for a later save, which holds all of them."""
    from ray.tune.experiment import Trial

    from sweeper.search._searcher import make_search
    from sweeper.search._tune_state import NewTrialsSavedFirst

    monkeypatch.setattr(NewTrialsSavedFirst, "SAVE_SHARE", 0.0)
    _, sched, _ = make_search(plan_for("asha"), tmp_path)
    tune = SavingController()
    sched.on_trial_add(tune, Trial("demo", trial_id="t0", stub=True))
    sched.choose_trial_to_run(tune)
    sched.on_trial_add(tune, Trial("demo", trial_id="t1", stub=True))
    sched.choose_trial_to_run(tune)
    assert len(tune.saves) == 1  # the first save took more than no time at all
    monkeypatch.setattr(NewTrialsSavedFirst, "SAVE_SHARE", 1.0)
    sched.choose_trial_to_run(tune)
    assert len(tune.saves) == 2  # t1 still waited for its save
