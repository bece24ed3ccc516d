"""The end-of-sweep summary: best trial, counts, setup time, where everything went; and how
the sweep ended, in the line the terminal shows after it (`how_it_ended`)."""

from __future__ import annotations

from rich.console import Console

from sweeper.track._book import best_of
from sweeper.names import TrialState
from sweeper.views import usd


def print_summary(run, console: Console) -> None:
    book, spec = run.book, run.spec
    best = book.best()
    console.print()
    # A stopped sweep says so, and how many of its trials are still to end (`sweep resume`).
    ended = "stopped after" if run.interrupted else "finished in"
    unfinished = sum(not t.finished for t in book.trials.values())
    console.print(
        f"Sweep {spec.name!r} {ended} {run.wall_seconds:.0f} s: {len(book.trials)} trials, "
        f"{book.count(TrialState.COMPLETED)} completed, {book.count(TrialState.PRUNED)} pruned, "
        f"{book.count(TrialState.FAILED)} failed" + (f", {unfinished} unfinished" if run.interrupted else "")
    )
    median_setup = book.median_setup_seconds()
    if median_setup is not None:
        console.print(f"Median setup per trial (start to first optimizer step): {median_setup:.1f} s")
    if best:
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.params.items())
        console.print(f"[bold]Best trial {best.number}[/bold] ({best.trial_id}): {book.metric}={best.last(book.metric):.4f}; {params}")
        opposite = "maximize" if book.goal == "minimize" else "minimize"
        completed = (t for t in book.trials.values() if t.state == TrialState.COMPLETED)
        worst = best_of(completed, lambda t: t.last(book.metric), opposite)
        if worst is not best:  # ASHA by promotion often lets one trial complete
            console.print(f"Worst completed trial {worst.number}: {book.metric}={worst.last(book.metric):.4f}")
    for trial in sorted(book.trials.values(), key=lambda t: t.number):
        if trial.out_of_memory:
            console.print(f"trial {trial.number}: {trial.out_of_memory}", highlight=False)
    cost = run.cost
    unit = "GPU-hours" if spec.resources.use_gpu else "CPU core-hours"
    per_million = f", ${cost.usd_per_million_tokens:.4f} per million tokens" if cost.usd_per_million_tokens else ""
    console.print(
        f"Cost: {usd(cost.usd)} ({cost.accelerator_hours:.3f} {unit}, {cost.tokens:,.0f} tokens{per_million}); "
        f"pruning saved {usd(cost.saved_by_pruning_usd)}"
    )
    if book.confirmation is not None:  # search.confirm: each config's seeds, mean and interval
        from sweeper.confirm import confirmation_lines, confirmation_table

        console.print(confirmation_table(book.confirmation))
        for line in confirmation_lines(book.confirmation):
            console.print(line, highlight=False, soft_wrap=True)
    for note in getattr(run, "notes", []):  # forecast against actual, what a budget cut
        console.print(note, highlight=False, soft_wrap=True)
    console.print(f"MLflow: {run.tracking_uri} (experiment {spec.tracking.experiment!r}, run {spec.name!r})")
    console.print(f"Sweep files: {spec.sweep_dir}")


def how_it_ended(run) -> tuple[str, str | None]:
    """How a sweep whose tuner returned ended: ("failed", the line) when a fault stopped it
    (a full disk: its line says what to do) or no trial completed, ("stopped", the line)
    when it was stopped (`sweep stop`, Ctrl-C, SIGTERM), else ("finished", None). The CLI
    ends with these lines, and the notifications quote them."""
    if run.stopped_for:
        return "failed", run.stopped_for
    if run.interrupted:
        return "stopped", f"Sweep stopped; continue it with: sweep resume {run.spec.name}"
    book = run.book
    if book.count(TrialState.COMPLETED) == 0:
        failed = [t.status_text for t in book.trials.values() if t.state == TrialState.FAILED]
        reason = f"; first failure: {failed[0]}" if failed else ""
        return "failed", f"no trial completed ({len(book.trials)} started){reason}"
    return "finished", None
