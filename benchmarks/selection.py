"""Selecting by eval loss or by exact match: on a task whose answers are checked exactly,
two sweeps per seed that differ only in `search.metric`, and the exact match each one's
winner reaches.

The task (`search_quality.write_task`, `--sft mixed`): the headroom task's base (the tiny
Llama's shape pretrained 1,000 steps on four chat task families), fine-tuned with LoRA on
four families it never saw, two with whole-word answers and two with one-token answers
(`mixed_answer_example`). The space is search_quality's "lora" space (learning rate log
[1e-4, 1e-2], `lora.r`, `lora.alpha_per_rank`, `training.warmup_ratio`).

Per seed (the search seed and `training.seed`), two sweeps through `run_sweep`, as
`sweep start` runs them, with the same trials, steps, rungs and generation: ASHA by
promotion ranking by eval loss at its one rung (`early_stopping.metric: eval_loss`), and
greedy answers to a fixed sample of the eval prompts at max_steps only (`generation.when:
end`), so both sweeps generate for the same trials at the same step and spend the same
compute; the winner is a trial that reached max_steps in either. One sweep selects by
`eval_loss`, the other by `gen_exact_match`; with `--confirm-top K` (`search.confirm`)
each then trains its best K configs again with `--confirm-seeds` new seeds and the
winner is the best mean.

A winner's exact match on the sample it was selected by flatters the sweep that selected
by it, so each winner's config is also trained again in this process (its search seed,
no Ray) and scored on `--test-examples` new prompts of the same families: the held-out
figure. The table gives, per selection metric, the winner's exact match per seed, median
and spread (min-max), on the sample and held out, after confirmation too, and how often
confirmation changed the winner; then exact match's winner minus eval loss's, seed by
seed (mean, bootstrap 95% interval: "tie" when it holds 0).

    python -m benchmarks.selection --seeds 0 1 2 --results runs/selection
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import bench_spec, machine, plain_run, run_bench_sweep, save_json
from benchmarks.search_quality import SFT_EXAMPLES, SPACES, paired_difference, spearman, write_task
from sweeper.spec import with_overrides

METRICS = {"eval_loss": "minimize", "gen_exact_match": "maximize"}
EM = "gen_exact_match"


def sections(args, task: tuple[Path, Path, Path], seed: int) -> dict:
    """The sweep's sections over the quickstart's, the same for both selection metrics."""
    return dict(
        model={"name_or_path": str(task[2])},
        data={"train": str(task[0]), "eval": str(task[1]), "max_length": 64},
        training={"max_steps": args.max_steps, "eval_every": args.eval_every, "per_device_batch_size": 8, "seed": seed},
        lora={"r": 8, "alpha_per_rank": 2},
        search={"num_trials": args.trials, "method": "tpe", "seed": seed, "parameters": SPACES["lora"]},
        early_stopping={"metric": "eval_loss", "reduction_factor": args.reduction_factor},
        generation={"scores": ["exact_match"], "when": "end", "samples": args.samples, "max_new_tokens": 12,
                    "answers_logged": 0},
    )


# A config's held-out exact match, by its run's sections and values: the two sweeps of a
# seed often pick the same config, and confirmation may pick the other sweep's winner.
_HELD_OUT: dict[str, float] = {}


def held_out(args, base: dict, params: dict, test: Path) -> float:
    """Exact match of the config `params` trained in this process on the test prompts."""
    run_sections = {**base, "data": {**base["data"], "eval": str(test)},
                    "generation": {**base["generation"], "samples": args.test_examples},
                    "early_stopping": {"scheduler": "none"}}
    run_sections.pop("search")
    key = json.dumps([run_sections, params], sort_keys=True, default=str)
    if key not in _HELD_OUT:
        spec = with_overrides(bench_spec("selection-held-out", **run_sections), params)
        _HELD_OUT[key] = plain_run(spec, with_generation=True).reports[-1][EM]
    return _HELD_OUT[key]


def run_one(args, task, test: Path, seed: int, metric: str, root: Path) -> dict:
    """One sweep selecting by `metric`, its winner and its confirmation, as figures."""
    base = sections(args, task, seed)
    search = {**base["search"], "metric": metric, "goal": METRICS[metric]}
    if args.confirm_top:
        search["confirm"] = {"top": args.confirm_top, "seeds": args.confirm_seeds}
    name = f"selection-{metric.replace('_', '-')}-{seed}"
    (root / name).mkdir(parents=True)
    sweep = run_bench_sweep(bench_spec(name, root / name, **{**base, "search": search}))
    trials = list(sweep.book.trials.values())
    finalists = [t for t in trials if t.confirms is None and t.step == args.max_steps and t.last(EM) is not None]
    sign = 1 if METRICS[metric] == "minimize" else -1
    winner = min(finalists, key=lambda t: (sign * t.last(metric), t.number))
    result = {
        "seed": seed, "metric": metric, "wall_s": sweep.wall_seconds,
        "steps": sum(t.step for t in trials if t.confirms is None),
        "finalists": [{"trial": t.number, "eval_loss": t.last("eval_loss"), "em": t.last(EM)} for t in finalists],
        "winner": winner.number, "winner_eval_loss": winner.last("eval_loss"), "winner_em": winner.last(EM),
        "winner_em_test": held_out(args, base, winner.params, test),
    }
    confirmation = sweep.book.confirmation
    if confirmation is not None and confirmation.winner is not None:
        chosen = confirmation.winner.candidate.number
        reruns = [t.last(EM) for t in trials if t.confirms == chosen and t.last(EM) is not None]
        by_number = {t.number: t for t in trials}
        result["confirm"] = {
            "winner": chosen, "changed": chosen != winner.number,
            "mean_em": statistics.fmean(reruns) if reruns else None,
            "em_test": result["winner_em_test"] if chosen == winner.number
            else held_out(args, base, by_number[chosen].params, test),
        }
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def verdict(paired: dict, seeds: int) -> str:
    if seeds < 2:
        return "one seed: no interval"
    if paired["low"] <= 0 <= paired["high"]:
        return "tie"
    return "exact match's winner ahead" if paired["mean"] > 0 else "eval loss's winner ahead"


def print_table(args, results: dict[str, list[dict]]) -> dict:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    confirmed = bool(args.confirm_top)
    table = Table(
        title=f"selecting by eval loss or exact match: {args.trials} trials of {args.max_steps} steps, rung by eval loss "
        f"keeping 1/{args.reduction_factor:g}, exact match on {args.samples} eval prompts at max_steps, held out on "
        f"{args.test_examples} new prompts, seeds {' '.join(map(str, args.seeds))}"
        + (f", confirmation top {args.confirm_top} x {args.confirm_seeds} seeds" if confirmed else ""),
        title_justify="left",
    )
    columns = ["selected by", "winner's exact match, per seed", "median (min-max)", "held out, per seed", "held out, median (min-max)",
               "winner's eval loss, median", "steps, per seed"]
    if confirmed:
        columns += ["confirmation changed the winner", "confirmed winner: mean exact match over new seeds, median",
                    "confirmed winner held out, median (min-max)"]
    for column in columns:
        table.add_column(column)
    figures: dict = {"arms": results, "paired": {}}
    for metric, runs in results.items():
        row = [metric, " ".join(f"{r['winner_em']:.3f}" for r in runs), spread([r["winner_em"] for r in runs]),
               " ".join(f"{r['winner_em_test']:.3f}" for r in runs), spread([r["winner_em_test"] for r in runs]),
               f"{statistics.median(r['winner_eval_loss'] for r in runs):.3f}", " ".join(str(r["steps"]) for r in runs)]
        if confirmed:
            done = [r["confirm"] for r in runs if "confirm" in r]
            means = [c["mean_em"] for c in done if c["mean_em"] is not None]
            row += [f"{sum(c['changed'] for c in done)} of {len(runs)}",
                    f"{statistics.median(means):.3f}" if means else "-",
                    spread([c["em_test"] for c in done]) if done else "-"]
        table.add_row(*row)
    console.print(table)
    by_loss, by_em = results["eval_loss"], results[EM]
    seeds = len(args.seeds)
    pairs = {"on the sample": lambda r: r["winner_em"], "held out": lambda r: r["winner_em_test"]}
    if confirmed and all("confirm" in r for r in by_loss + by_em):
        pairs["after confirmation, held out"] = lambda r: r["confirm"]["em_test"]
    for label, value in pairs.items():
        paired = paired_difference([value(r) for r in by_em], [value(r) for r in by_loss])
        paired["verdict"] = verdict(paired, seeds)
        figures["paired"][label] = paired
        console.print(
            f"exact match's winner minus eval loss's, {label}, seed by seed: mean {paired['mean']:+.3f} (95% interval "
            f"{paired['low']:+.3f} to {paired['high']:+.3f}); higher on {paired['worse']}, lower on {paired['better']}, "
            f"equal on {paired['equal']} of {seeds} seeds: {paired['verdict']}"
        )
    same = sum(a["winner"] == b["winner"] for a, b in zip(by_loss, by_em))
    finalists = [f for r in by_loss + by_em for f in r["finalists"]]
    figures["same_winner"] = same
    rank = spearman([f["eval_loss"] for f in finalists], [f["em"] for f in finalists]) if len(finalists) > 2 else None
    figures["finalists_spearman"] = rank
    console.print(
        f"the two sweeps picked the same trial number on {same} of {seeds} seeds; Spearman of eval loss and exact match "
        f"over the finalists of all sweeps ({len(finalists)}): " + ("-" if rank is None else f"{rank:+.2f}")
    )
    console.print(f"machine: {machine()}")
    return figures


def write_test(folder: Path, count: int) -> Path:
    """`count` prompts of the task's families from their own random stream (none of the
    train or eval files' draws): the held-out prompts."""
    rng = random.Random(4321)
    path = folder.resolve() / "test.jsonl"
    path.write_text("".join(json.dumps(SFT_EXAMPLES["mixed"](rng)) + "\n" for _ in range(count)))
    return path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="search seed and training.seed, two sweeps each")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=243)
    parser.add_argument("--eval-every", type=int, default=27, help="also the rung: max_steps / 27 on an evaluation")
    parser.add_argument("--reduction-factor", type=float, default=2, help="the rung keeps 1/this of the trials")
    parser.add_argument("--confirm-top", type=int, default=3, help="search.confirm's top; 0: no confirmation")
    parser.add_argument("--confirm-seeds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=160, help="generation.samples: eval prompts answered (the eval file has 160)")
    parser.add_argument("--test-examples", type=int, default=200, help="held-out prompts each winner answers")
    parser.add_argument("--base-steps", type=int, default=1000, help="pretraining steps of the base")
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--results", type=Path, default=Path("runs/selection"), help="the task's files and base, and the sweeps")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    task = write_task(args.results / "task", args.base_steps, args.train_examples, sft="mixed")
    test = write_test(args.results / "task", args.test_examples)
    sweeps = Path(tempfile.mkdtemp(prefix="sweeps-", dir=args.results)).resolve()  # a new folder per run
    results: dict[str, list[dict]] = {metric: [] for metric in METRICS}
    for seed in args.seeds:
        for metric in METRICS:
            result = run_one(args, task, test, seed, metric, sweeps)
            results[metric].append(result)
            print(f"seed {seed}, by {metric}: winner #{result['winner']} exact match {result['winner_em']:.3f} "
                  f"(held out {result['winner_em_test']:.3f}), {result['wall_s']:.0f} s", flush=True)
    figures = print_table(args, results)
    save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
