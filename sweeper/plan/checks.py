"""The one validation pass of `sweep validate`, `sweep plan` and `sweep start` (and the
Python API's start). The schema comes first (fields and cross-field rules, without
reading anything but the trial sections' own files: `sweeper.spec.load`); then the
checks that read the disk: the output folder can be made, each budget cap can pay for
one trial, and a GPU trial fits the card `cost.accelerator` names (both read the model's
config, here or in the Hugging Face cache).
Every problem is one keyed line; all of them are raised together. The checks that need
the cluster (its GPUs' memory, its nodes' view of storage) run when Ray is up, in the
launch."""

from __future__ import annotations

import os
from pathlib import Path

from sweeper.errors import UserError
from sweeper.plan.budget import budget_problems
from sweeper.spec.load import load_spec
from sweeper.spec.schema import SweepSpec

__all__ = ["load_checked_spec", "check_spec", "folder_creation_problem"]


def load_checked_spec(path: str | Path) -> SweepSpec:
    """A sweep file read, validated and checked against the disk, for a new sweep."""
    spec = load_spec(path)
    check_spec(spec)
    return spec


def check_spec(spec: SweepSpec) -> None:
    """Raise UserError with every problem the disk shows of a valid spec, one keyed line each."""
    from sweeper.cost.memory import gpu_memory_gib, unfit_problems

    card_gib = gpu_memory_gib(spec.cost.accelerator)
    spec, packing_lines = _packed_for_checks(spec, card_gib)
    unfit = [] if packing_lines else unfit_problems(spec, card_gib)  # the packing's line says it already
    problems = [*_output_dir_problems(spec), *budget_problems(spec), *unfit]
    if problems or packing_lines:
        raise UserError(*packing_lines, *(f"{key}: {message}" for key, message in problems))


def _packed_for_checks(spec: SweepSpec, card_gib: float | None) -> tuple[SweepSpec, list[str]]:
    """`resources.gpus_per_worker: auto` sized on cost.accelerator's card, and its problem;
    one GPU per trial where no card is named (the cluster's GPU decides at start) or it
    is refused, so that the other checks count with a number."""
    from sweeper.cost.memory import with_gpu_packing

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
    """A new sweep folder must be creatable. An existing one is not checked here: the
    read-only commands read old sweeps wherever they lie (resume checks it can write)."""
    problem = folder_creation_problem(spec.sweep_dir)
    return [("output_dir", f"{problem}; give a folder you can write to")] if problem else []


def folder_creation_problem(folder: Path) -> str | None:
    """Why `folder` (absent, or present) cannot be created and written, or None."""
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is a file, not a folder"
        return None
    ancestor = folder.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {folder}: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create {folder}: {ancestor} is read-only"
    return None
