"""The command that writes a first sweep file: init (the logic is the `sweeper.scaffold` package)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from sweeper.cli._common import console


def init(
    model: str = typer.Option(
        ..., "--model", help="Base model: a Hugging Face id ORG/NAME (cached or reachable), a local model folder, "
        "or builtin:tiny-llama."
    ),
    data: str = typer.Option(
        ..., "--data", help="Training data: a JSONL or Parquet file, a save_to_disk folder, or a Hub split ORG/NAME:SPLIT."
    ),
    eval_data: Optional[str] = typer.Option(
        None, "--eval", help="Evaluation data (default: eval, validation, valid, val, test or dev beside --data)."
    ),
    task: str = typer.Option("sft", "--task", help="What each trial trains: sft or dpo."),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", help="GPU type each trial trains on (a10g, l40s, a100-40gb, a100-80gb, h100, h200, "
        "rtx4090): sizes the batch by its memory forecast and prices the sweep; default: CPUs."
    ),
    trials: int = typer.Option(16, "--trials", help="Trials the sweep runs."),
    name: Optional[str] = typer.Option(None, "--name", help="Sweep name (default: the model's name and the task)."),
    output: Path = typer.Option(Path("search.yaml"), "--output", "-o", help="YAML file to write."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output file."),
) -> None:
    """Write a commented sweep YAML for a model and data: a search space from published
    guidance, max_length, batch and steps from the data's tokens, and the memory forecast for --gpu."""
    from sweeper.scaffold import scaffold_sweep, write_sweep_file

    command = " ".join(["sweep init", *sys.argv[2:]]) if sys.argv[1:2] == ["init"] else ""
    sweep = scaffold_sweep(
        model, data, output, task=task, gpu=gpu, eval_data=eval_data, trials=trials, name=name, command=command
    )
    write_sweep_file(sweep, output, force=force)
    spec = sweep.spec
    console.print(
        f"[green]wrote[/green] {output}: sweep {spec.name!r}, task {spec.task}, {spec.search.num_trials} trials over "
        f"{', '.join(spec.search.parameters)}; {spec.training.max_steps} steps a trial",
        highlight=False, soft_wrap=True,
    )
    if sweep.memory is not None:
        console.print(escape(sweep.memory.describe()), highlight=False)
    console.print(f"Next: sweep validate {output} && sweep plan {output} && sweep start {output}", highlight=False, soft_wrap=True)
