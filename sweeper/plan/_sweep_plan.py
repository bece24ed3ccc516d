"""Plan: a validated spec plus the cluster's resources become everything the launcher
needs (searcher, scheduler, per-trial resources, how many trials at once). Pure: the
cluster's resources come in as numbers, so this runs and is tested without Ray."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from sweeper.errors import UserError
from sweeper.plan._rungs import asha_rungs, milestone_counts, steps_trained
from sweeper.spec import SweepSpec, most_trials


@dataclass(frozen=True)
class ClusterResources:
    cpus: float
    gpus: float
    max_node_cpus: float
    max_node_gpus: float
    # Every other resource of the nodes (resources.custom asks for them): name -> (total, largest on a node).
    custom: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def from_ray(cls) -> "ClusterResources":
        import ray

        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        names = {name for node in nodes for name in node} - {"CPU", "GPU"}
        return cls(
            cpus=sum(n.get("CPU", 0) for n in nodes),
            gpus=sum(n.get("GPU", 0) for n in nodes),
            max_node_cpus=max((n.get("CPU", 0) for n in nodes), default=0),
            max_node_gpus=max((n.get("GPU", 0) for n in nodes), default=0),
            custom={name: (sum(n.get(name, 0) for n in nodes), max(n.get(name, 0) for n in nodes)) for name in names},
        )


@dataclass(frozen=True)
class TrialResources:
    workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    custom_per_worker: dict[str, float] = field(default_factory=dict)  # resources.custom

    @property
    def cpus(self) -> float:
        return self.workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        return self.workers * self.gpus_per_worker


@dataclass(frozen=True)
class SweepPlan:
    spec: SweepSpec
    trial_resources: TrialResources
    concurrent_trials: int
    cluster_slots: int
    rungs: list[int]

    @property
    def trials(self) -> int | None:
        """The most trials the sweep runs; None when they keep coming until a budget cap."""
        return most_trials(self.spec)

    def with_trials(self, num_trials: int) -> "SweepPlan":
        """This plan as if search.num_trials were `num_trials`: what the forecast of a sweep
        that runs until a budget cap counts with, for each trial count it tries."""
        search = self.spec.search.model_copy(update={"num_trials": num_trials})
        spec = self.spec.model_copy(update={"search": search})
        return dataclasses.replace(self, spec=spec, concurrent_trials=max(1, min(self.concurrent_trials, num_trials)))

    def ladder(self, num_trials: int | None = None) -> tuple[list[tuple[int, int]], bool]:
        """(step, most trials that train to it) for `num_trials` trials (the plan's when
        None), and whether each segment after a trial's first is a Train run of its own
        (ASHA by promotion resumes a promoted trial from its checkpoint). Ray's ASHA (by
        stopping) is taken to follow the same ladder; median stopping and none to prune
        nothing."""
        spec, n = self.spec, self.trials if num_trials is None else num_trials
        stopping, max_steps = spec.early_stopping, spec.training.max_steps
        if stopping.scheduler not in ("asha", "asha_stopping") or not spec.search.parameters:
            return [(max_steps, n)], False
        promotion = stopping.scheduler == "asha"
        startup = min(n, stopping.startup_trials_for()) if promotion else 0
        return milestone_counts(n, self.rungs, max_steps, stopping.reduction_factor_for(), startup), promotion

    def step_budget(self) -> str:
        """One line on the training steps the sweep will spend at most."""
        spec, max_steps = self.spec, self.spec.training.max_steps
        if self.trials is None:
            caps = ", ".join(f"budget.{key}: {value:g}" for key, value in spec.budget.caps().items())
            return f"trials until a budget cap ({caps}), each to at most {max_steps} steps"
        full = self.trials * max_steps
        confirm = spec.search.confirm
        # search.confirm: top x seeds reruns to max_steps after the search.
        reruns = f"; then {confirm.top * confirm.seeds} confirmation trials x {max_steps}" if confirm else ""
        counts, promotion = self.ladder()
        if not promotion:
            how = "without early stopping" if spec.early_stopping.scheduler == "none" else "before early stopping"
            return f"{full} training steps {how} ({self.trials} trials x {max_steps}){reruns}"
        reach = ", ".join(f"{n} to step {milestone}" for milestone, n in counts)
        return f"at most {steps_trained(counts)} training steps ({reach}); {full} without early stopping{reruns}"


def concurrency_limit(trial: TrialResources, cluster: ClusterResources) -> int:
    """How many trials fit on the cluster at once; raises UserError if not even one does."""
    if trial.cpus_per_worker > cluster.max_node_cpus:
        raise UserError(
            f"resources.cpus_per_worker: {trial.cpus_per_worker:g} CPUs per worker, but the largest "
            f"node has {cluster.max_node_cpus:g}; lower it or add bigger nodes"
        )
    if trial.gpus_per_worker > cluster.max_node_gpus:
        raise UserError(
            f"resources.gpus_per_worker: {trial.gpus_per_worker:g} GPUs per worker, but the largest "
            f"node has {cluster.max_node_gpus:g}; lower it, set use_gpu: false, or add GPU nodes"
        )
    for name, amount in trial.custom_per_worker.items():
        total, largest = cluster.custom.get(name, (0, 0))
        if amount > largest:
            raise UserError(
                f"resources.custom.{name}: {amount:g} per worker, but "
                + (f"the largest node has {largest:g}" if largest else "no node of the cluster has it")
                + f"; start nodes with it (ray start --resources '{{\"{name}\": {amount:g}}}') or lower it"
            )
    slots = math.floor(cluster.cpus / trial.cpus + 1e-9)
    if trial.gpus:
        slots = min(slots, math.floor(cluster.gpus / trial.gpus + 1e-9))
    for name, amount in trial.custom_per_worker.items():
        slots = min(slots, math.floor(cluster.custom[name][0] / (amount * trial.workers) + 1e-9))
    if slots < 1:
        have = f"{cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs"
        need = f"{trial.cpus:g} CPUs, {trial.gpus:g} GPUs"
        raise UserError(
            f"resources.workers_per_trial: one trial needs {need} ({trial.workers} workers) but the "
            f"cluster has {have}; lower workers_per_trial or cpus_per_worker"
        )
    return slots


def make_plan(spec: SweepSpec, cluster: ClusterResources) -> SweepPlan:
    resources = spec.resources
    trial = TrialResources(
        resources.workers_per_trial, resources.cpus_per_worker, resources.gpus_per_worker, dict(resources.custom)
    )
    slots = concurrency_limit(trial, cluster)
    requested = spec.search.max_concurrent_trials or slots
    concurrent = max(1, min(requested, slots, most_trials(spec) or slots))
    return SweepPlan(spec=spec, trial_resources=trial, concurrent_trials=concurrent, cluster_slots=slots, rungs=plan_rungs(spec))


def plan_rungs(spec: SweepSpec) -> list[int]:
    """The steps at which the sweep's ASHA ranks trials (none under median stopping or none)."""
    stopping = spec.early_stopping
    if stopping.scheduler not in ("asha", "asha_stopping"):
        return []
    return asha_rungs(spec.grace_period(), spec.training.max_steps, stopping.rung_spacing_for(),
                      stopping.rung_count(searched=bool(spec.search.parameters)))


def generation_steps(spec: SweepSpec) -> frozenset[int] | None:
    """The steps besides max_steps at which a trial generates (`generation.when`): None at
    every evaluation (every_eval), the plan's rungs (rungs), none (end, or no generation)."""
    when = spec.generation.when if spec.generation is not None else "end"
    return None if when == "every_eval" else frozenset(plan_rungs(spec) if when == "rungs" else ())
