"""The rung arithmetic, in one place: where ASHA ranks trials, how many of those ranked at
a rung go on, how many trials train to each milestone and how many steps that is, and
how many evaluations and generation passes a stretch of training runs. Pure functions of
numbers: the plan, the forecast, the budget guard and ASHA by promotion all count with these."""

from __future__ import annotations

import math

__all__ = ["asha_rungs", "rung_quota", "milestone_counts", "steps_trained", "promotion_steps", "evaluations_between",
           "generations_between"]


def rung_quota(ranked: int, reduction_factor: float) -> int:
    """How many of the trials ranked at a rung go on from it: floor(n / eta). ASHA by
    promotion lets at least one go on once no more trials can reach the rung."""
    return math.floor(ranked / reduction_factor + 1e-9)


def milestone_counts(
    num_trials: int, rungs: list[int], max_steps: int, reduction_factor: float, startup_trials: int = 0
) -> list[tuple[int, int]]:
    """(step, most trials that train to it) for each rung and max_steps under ASHA by
    promotion: every trial to the first rung, then at most max(1, floor(n / eta)) of the
    n ranked at a rung on to the next milestone (failed trials only lower it). The
    `startup_trials` train to max_steps unranked, beside the others' ladder.

    >>> milestone_counts(9, [10, 30], 90, 3)
    [(10, 9), (30, 3), (90, 1)]
    >>> milestone_counts(11, [10, 30], 90, 3, startup_trials=2)
    [(10, 11), (30, 5), (90, 3)]
    >>> milestone_counts(0, [10, 30], 90, 3)  # every trial failed: none goes on
    [(10, 0), (30, 0), (90, 0)]
    """
    reaching, counts = num_trials - startup_trials, []
    for milestone in [*rungs, max_steps]:
        counts.append((milestone, reaching + startup_trials))
        reaching = max(1, rung_quota(reaching, reduction_factor)) if reaching > 0 else 0
    return counts


def steps_trained(counts: list[tuple[int, int]]) -> int:
    """Training steps of the trials in `milestone_counts`: each trains from the milestone
    before to the last one it reaches."""
    previous = [0, *(milestone for milestone, _ in counts[:-1])]
    return sum(n * (milestone - before) for (milestone, n), before in zip(counts, previous))


def promotion_steps(num_trials: int, grace_period: int, max_steps: int, reduction_factor: float) -> int:
    """The rung arithmetic: steps that ASHA by promotion trains at most for `num_trials`
    trials, N to the first rung and the rung quota of them on to each next milestone.

    >>> promotion_steps(9, grace_period=10, max_steps=90, reduction_factor=3)
    210
    """
    rungs = asha_rungs(grace_period, max_steps, reduction_factor)
    return steps_trained(milestone_counts(num_trials, rungs, max_steps, reduction_factor))


def asha_rungs(grace_period: int, max_steps: int, spacing: float, count: int | None = None) -> list[int]:
    """Steps at which ASHA compares trials: r, r*s, r*s^2, ... below max_steps, s the
    rungs' spacing (ASHA's eta unless early_stopping.rung_spacing says otherwise), the
    first `count` of them (early_stopping.rungs; all when None)."""
    rungs, milestone = [], grace_period
    while milestone < max_steps:
        rungs.append(int(milestone))
        milestone *= spacing
    return rungs[:count]


def evaluations_between(start: int, end: int, eval_every: int, max_steps: int) -> int:
    """Evaluations a trial runs training from step `start` to `end` (it also evaluates at
    max_steps when that is not a multiple of eval_every)."""
    count = end // eval_every - start // eval_every
    if end == max_steps and max_steps % eval_every:
        count += 1
    return count


def generations_between(start: int, end: int, eval_every: int, max_steps: int, steps: frozenset[int] | None) -> int:
    """Generation passes a trial runs training from step `start` to `end`: at every
    evaluation where `steps` is None (generation.when every_eval), else at the evaluations
    on `steps` and at max_steps (as `GenerationSample.due`)."""
    if steps is None:
        return evaluations_between(start, end, eval_every, max_steps)
    due = {step for step in steps if step % eval_every == 0} | {max_steps}
    return sum(1 for step in due if start < step <= end)
