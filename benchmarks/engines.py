"""The built-in loop and trl's trainer side by side on the same config: SFT (trl's
SFTTrainer) on the quickstart's model, data, batch and LoRA, or with `--task dpo` DPO
(trl's DPOTrainer, sigmoid loss, beta 0.1) on the shipped preference pairs with the DPO
quickstart's lengths; one learning rate, the same seeds, one trial each
trained in this process as a trial's worker trains it (`sweeper.plan._calibrate.
run_training`: the engine `trainer` picks, the data as the sweep's driver prepares it).
Prints, per engine, the final eval loss of each seed and its spread, the steps trained,
training tokens/s and the setup seconds (trial start to the end of the first step).

    python -m benchmarks.engines --steps 60 --seeds 0 1
    python -m benchmarks.engines --task dpo --steps 60 --seeds 0 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common import REPO, bench_spec, machine, save_json, tokens_per_second

PREFERENCE_DATA = REPO / "data" / "preference"
# The DPO config both engines train: the DPO quickstart's (search_spaces/dpo-quickstart.yaml).
DPO_BETA, DPO_MAX_PROMPT_LENGTH, DPO_MAX_LENGTH = 0.1, 64, 96


def task_sections(task: str, trainer: str) -> dict:
    """The spec sections of `task` (sft or dpo) through `trainer` (builtin or trl)."""
    if task == "sft":
        return {"trl": {"method": "sft"}} if trainer == "trl" else {}
    sections = {
        "task": "dpo",
        "data": {"train": str(PREFERENCE_DATA / "train.jsonl"), "eval": str(PREFERENCE_DATA / "eval.jsonl"),
                 "max_length": DPO_MAX_LENGTH},
        "lora": {"dropout": 0.0},
    }
    if trainer == "trl":
        # trl's DPOConfig cuts whole sequences at data.max_length (it has no prompt length);
        # the dpo section stays valid beside it (its prompt length under data.max_length).
        return {**sections, "trl": {"method": "dpo", "beta": DPO_BETA, "loss_type": "sigmoid"},
                "dpo": {"max_prompt_length": DPO_MAX_PROMPT_LENGTH}}
    return {**sections, "dpo": {"beta": DPO_BETA, "loss_type": "sigmoid", "max_prompt_length": DPO_MAX_PROMPT_LENGTH}}


def run_engine(task: str, trainer: str, seed: int, steps: int, eval_every: int, learning_rate: float):
    from sweeper.plan import run_training, prepare_inputs
    from trainables.models import DEFAULT_CACHE_ROOT

    sections = task_sections(task, trainer)
    spec = bench_spec(
        f"engines-{trainer}-{seed}", trainer=trainer, **sections,
        training={"max_steps": steps, "eval_every": eval_every, "seed": seed, "learning_rate": learning_rate},
        search={"num_trials": 1, "parameters": {}}, early_stopping={"scheduler": "none"},
    )
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    reports: list[dict] = []
    started = time.time()
    run_training(spec, inputs.data, inputs.model_source, lambda metrics, _: reports.append(metrics), started)
    return {
        "eval_loss": reports[-1]["eval_loss"],
        "eval_rewards_accuracy": reports[-1].get("eval_rewards_accuracy"),
        "steps": reports[-1]["step"],
        "tokens_per_second": tokens_per_second(reports),
        "setup_seconds": reports[0]["setup_seconds"],
        "wall_seconds": time.time() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("sft", "dpo"), default="sft")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    figures: dict[str, list[dict]] = {"builtin": [], "trl": []}
    for seed in args.seeds:
        for trainer in figures:
            figures[trainer].append(run_engine(args.task, trainer, seed, args.steps, args.eval_every, args.learning_rate))

    console = Console()
    trainer_name = "SFTTrainer" if args.task == "sft" else "DPOTrainer"
    table = Table(title=f"{args.task.upper()}, built-in loop vs trl's {trainer_name} ({args.steps} steps, learning rate "
                        f"{args.learning_rate:g}, seeds {args.seeds})",
                  title_justify="left")
    columns = ["engine", "final eval loss per seed", "mean", "steps", "tokens/s", "setup s", "wall s"]
    if args.task == "dpo":
        columns.insert(3, "reward accuracy per seed")
    for column in columns:
        table.add_column(column, justify="left" if column == "engine" else "right")
    for trainer, runs in figures.items():
        losses = [run["eval_loss"] for run in runs]
        accuracy = [", ".join(f"{run['eval_rewards_accuracy']:.3f}" for run in runs)] if args.task == "dpo" else []
        table.add_row(
            trainer, ", ".join(f"{loss:.4f}" for loss in losses), f"{statistics.fmean(losses):.4f}", *accuracy,
            str(runs[0]["steps"]), f"{statistics.median(r['tokens_per_second'] for r in runs):,.0f}",
            f"{statistics.median(r['setup_seconds'] for r in runs):.1f}",
            f"{statistics.median(r['wall_seconds'] for r in runs):.1f}",
        )
    console.print(table)
    builtin = statistics.fmean(r["eval_loss"] for r in figures["builtin"])
    trl = statistics.fmean(r["eval_loss"] for r in figures["trl"])
    console.print(f"trl's mean final eval loss against the built-in loop's: {100 * (trl - builtin) / builtin:+.2f}%")
    console.print(f"machine: {machine()}")
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
