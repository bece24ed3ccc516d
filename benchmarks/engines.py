"""The built-in loop and trl's SFTTrainer side by side on the same SFT config: the
quickstart's model, data, batch and LoRA, one learning rate, the same seeds, one trial each
trained in this process as a trial's worker trains it (`sweeper.plan._calibrate.
run_training`: the engine `trainer` picks, the data as the sweep's driver prepares it).
Prints, per engine, the final eval loss of each seed and its spread, the steps trained,
training tokens/s and the setup seconds (trial start to the end of the first step).

    python -m benchmarks.engines --steps 60 --seeds 0 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common import bench_spec, machine, save_json, tokens_per_second


def run_engine(trainer: str, seed: int, steps: int, eval_every: int, learning_rate: float):
    from sweeper.plan import run_training, prepare_inputs
    from trainables.models import DEFAULT_CACHE_ROOT

    sections = {"trl": {"method": "sft"}} if trainer == "trl" else {}
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
        "steps": reports[-1]["step"],
        "tokens_per_second": tokens_per_second(reports),
        "setup_seconds": reports[0]["setup_seconds"],
        "wall_seconds": time.time() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    figures: dict[str, list[dict]] = {"builtin": [], "trl": []}
    for seed in args.seeds:
        for trainer in figures:
            figures[trainer].append(run_engine(trainer, seed, args.steps, args.eval_every, args.learning_rate))

    console = Console()
    table = Table(title=f"SFT, built-in loop vs trl's SFTTrainer ({args.steps} steps, learning rate "
                        f"{args.learning_rate:g}, seeds {args.seeds})",
                  title_justify="left")
    for column in ("engine", "final eval loss per seed", "mean", "steps", "tokens/s", "setup s", "wall s"):
        table.add_column(column, justify="left" if column == "engine" else "right")
    for trainer, runs in figures.items():
        losses = [run["eval_loss"] for run in runs]
        table.add_row(
            trainer, ", ".join(f"{loss:.4f}" for loss in losses), f"{statistics.fmean(losses):.4f}",
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
