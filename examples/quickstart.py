"""The quickstart through the Python API: `sweep start search_spaces/quickstart.yaml`,
then `sweep status`, `sweep list` and `sweep report`, as functions returning frames.

Run (from any folder; the MLflow store, ./mlflow.db, and the sweep's files, ./sweeps/,
go to the working directory, as with the CLI):

    python examples/quickstart.py                           # the shipped sweep: 10 trials, 90 steps
    python examples/quickstart.py --trials 2 --max-steps 20 # a smaller one (what the test runs)
    python examples/quickstart.py --overwrite --no-report   # run it again, without the report

The sweep is search_spaces/quickstart.yaml read as a mapping, so that its trial and step
counts can be changed before it is validated; `sweeper.start` also takes the file's path.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl
import yaml

import sweeper

QUICKSTART = Path(__file__).resolve().parent.parent / "search_spaces" / "quickstart.yaml"


def quickstart_spec(trials: int | None = None, max_steps: int | None = None) -> dict:
    """The quickstart sweep as a mapping, with `search.num_trials` and
    `training.max_steps` replaced where given. A mapping's relative paths resolve against
    the working directory, so the data files are made absolute here."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    for split in ("train", "eval"):
        raw["data"][split] = str((QUICKSTART.parent / raw["data"][split]).resolve())
    if trials is not None:
        raw["search"]["num_trials"] = trials
    if max_steps is not None:
        raw["training"]["max_steps"] = max_steps
    return raw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, help="search.num_trials (default: the YAML's, 10)")
    parser.add_argument("--max-steps", type=int, help="training.max_steps (default: the YAML's, 90)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier sweep named quickstart")
    parser.add_argument("--no-report", action="store_true", help="skip the report (index.html, report.md)")
    args = parser.parse_args(argv)

    spec = quickstart_spec(args.trials, args.max_steps)
    # The live table while it runs, the summary when it ends; a spec error raises
    # sweeper.errors.UserError with the CLI's keyed lines.
    run = sweeper.start(spec, overwrite=args.overwrite)
    name = run.spec.name

    # `sweep status`: one row per trial, a column per searched parameter.
    trials = sweeper.status(name)
    parameters = list(run.spec.search.parameters)
    print("\nTrials:")
    print(trials.select("trial_number", "state", "steps", "metric", *parameters))

    best = trials.filter(pl.col("state") == "completed").sort(
        "metric", descending=run.spec.search.goal == "maximize"
    ).head(1)
    if best.is_empty():
        print("No trial completed; `sweep status quickstart` says why.")
    else:
        row = best.row(0, named=True)
        config = ", ".join(f"{key}={row[key]:.4g}" if isinstance(row[key], float) else f"{key}={row[key]}"
                           for key in parameters)
        print(f"\nBest trial: {row['trial_number']}, {run.spec.search.metric}={row['metric']:.4f}, {config}")

    # `sweep list`: one row per sweep in the store.
    print("\nSweeps:")
    print(sweeper.sweeps().select("sweep", "status", "trials", "metric", "best"))

    if not args.no_report:
        written = sweeper.report(name)  # `sweep report`: index.html, report.md, the leaderboard
        print(f"\nReport: {written.html}")


if __name__ == "__main__":
    main()
