"""The end-of-sweep summary: best trial, counts, setup time, where everything went."""

from __future__ import annotations

from rich.console import Console

from sweeper.console import trial_table

def print_summary(run, console: Console) -> None:
    book, spec = run.book, run.spec
    best = book.best()
    console.print()
    console.print(
        f"Sweep {spec.name!r} finished in {run.wall_seconds:.0f} s: {len(book.trials)} trials, "
        f"{book.count('completed')} completed, {book.count('pruned')} pruned, {book.count('failed')} failed"
    )
    median_setup = book.median_setup_seconds()
    if median_setup is not None:
        console.print(f"Median setup per trial (start to first optimizer step): {median_setup:.1f} s")
    if best:
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.params.items())
        console.print(f"[bold]Best trial {best.number}[/bold] ({best.trial_id}): {book.metric}={best.last(book.metric):.4f}; {params}")
        worst = max(
            (t for t in book.trials.values() if t.status == "completed"),
            key=lambda t: t.last(book.metric) * (1 if book.goal == "minimize" else -1),
        )
        console.print(f"Worst completed trial {worst.number}: {book.metric}={worst.last(book.metric):.4f}")
    for extra in getattr(run, "summary_lines", []):
        console.print(extra)
    console.print(f"Sweep files: {spec.sweep_dir}")
