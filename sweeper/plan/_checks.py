"""The one validation pass of `sweep validate`, `sweep plan` and `sweep start`: the schema
(`sweeper.spec`), then the checks that read the disk: the output folder (and a storage.uri
folder) can be made and written, each budget cap can pay for one trial, a GPU trial fits
the card `cost.accelerator` names, a GRPO sweep's reward functions import and score a
few eval rows; and the environment: each notify webhook's url_env holds a URL. Every
problem is one keyed line, all raised together.
The checks that need the cluster run in the launch, once Ray is up."""

from __future__ import annotations

import os
from pathlib import Path

from sweeper.cluster.storage import is_remote
from sweeper.errors import UserError
from sweeper.folders import folder_creation_problem
from sweeper.plan._caps import budget_problems
from sweeper.spec import load_spec, notify_problems, SweepSpec

__all__ = ["load_checked_spec", "check_spec"]


def load_checked_spec(path: str | Path) -> SweepSpec:
    """A sweep file read, validated and checked against the disk, for a new sweep."""
    spec = load_spec(path)
    check_spec(spec)
    return spec


def check_spec(spec: SweepSpec) -> None:
    """Raise UserError with every problem the disk shows of a valid spec, one keyed line each."""
    from sweeper.cost import gpu_memory_gib, unfit_problems

    card_gib = gpu_memory_gib(spec.cost.accelerator)
    spec, packing_lines = _packed_for_checks(spec, card_gib)
    unfit = [] if packing_lines else unfit_problems(spec, card_gib)  # the packing's line says it already
    problems = [
        *_output_dir_problems(spec), *budget_problems(spec), *unfit, *_reward_function_problems(spec),
        *notify_problems(spec.notify, os.environ),
    ]
    if problems or packing_lines:
        raise UserError(*packing_lines, *(f"{key}: {message}" for key, message in problems))


def _packed_for_checks(spec: SweepSpec, card_gib: float | None) -> tuple[SweepSpec, list[str]]:
    """`resources.gpus_per_worker: auto` sized on cost.accelerator's card, and its problem;
    one GPU per trial where no card is named (the cluster's GPU decides at start) or it
    is refused, so that the other checks count with a number."""
    from sweeper.cost import with_gpu_packing

    if spec.resources.gpus_per_worker != "auto":
        return spec, []
    one_gpu = spec.model_copy(update={"resources": spec.resources.model_copy(update={"gpus_per_worker": 1.0})})
    if card_gib is None:
        return one_gpu, []
    try:
        return with_gpu_packing(spec, card_gib)[0], []
    except UserError as refused:
        return one_gpu, refused.lines


def _output_dir_problems(spec: SweepSpec) -> list[tuple[str, str]]:
    """The sweep folder, and a folder named by storage.uri, must be creatable and
    writable (tried: as root, os.access says yes even under /proc). An existing sweep
    folder is a start with --overwrite: it is written into too."""
    problems = []
    problem = folder_creation_problem(spec.sweep_dir)
    if problem:
        problems.append(("output_dir", f"{problem}; give a folder you can write to"))
    uri = spec.storage.uri
    if uri and not is_remote(uri) and Path(uri) != spec.sweep_dir:
        problem = folder_creation_problem(Path(uri))
        if problem:
            problems.append(("storage.uri", f"{problem}; give a folder you can write to, or s3://bucket/prefix"))
    return problems


# Eval rows each reward function is called on before any trial.
_REWARD_CHECK_ROWS = 4


def _reward_function_problems(spec: SweepSpec) -> list[tuple[str, str]]:
    """trl.reward_funcs, each imported (a reward model loaded as trl loads it) and called
    on the first eval rows with their references as completions (trainables/grpo.py)."""
    if spec.trainer != "trl" or spec.trl is None or spec.trl.method != "grpo" or not spec.trl.reward_funcs:
        return []
    from trainables.data import read_records
    from trainables.errors import InputError
    from trainables.grpo import grpo_rows, reward_function_problems

    try:
        rows = grpo_rows(read_records(spec.data.eval, "data.eval")[:_REWARD_CHECK_ROWS], "data.eval")
    except InputError as exc:
        return [("data.eval", str(exc).removeprefix("data.eval: "))]
    return reward_function_problems(spec.trl.reward_funcs, rows, spec.trl.fields)
