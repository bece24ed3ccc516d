"""Several benchmarks run one after the other in one process, as their tests read them:
one set of imports and one local Ray cluster for all their sweeps (a cluster started by
the first sweep stays up for the next, as within `benchmarks.warm_start`), instead of one
per benchmark.

    python -m tests.integration.run_benchmarks FOLDER '[["pruning", ["--trials", "3"]], ...]'

Per benchmark NAME, in FOLDER: NAME.json (its `--json` figures), NAME.out (what it
printed) and, where it raised, NAME.error (the traceback); the next one runs regardless.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import traceback
from pathlib import Path


def main(folder: Path, runs: list[tuple[str, list[str]]]) -> None:
    for name, args in runs:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                importlib.import_module(f"benchmarks.{name}").main([*args, "--json", str(folder / f"{name}.json")])
        except BaseException:  # argparse's SystemExit too: the next benchmark still runs
            (folder / f"{name}.error").write_text(traceback.format_exc())
        (folder / f"{name}.out").write_text(printed.getvalue())
        print(printed.getvalue(), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
