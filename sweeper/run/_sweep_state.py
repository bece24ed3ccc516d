"""What `sweep resume` reads, checked before it starts anything: Tune's state (the tuner,
the experiment state, the searcher's state) and the checkpoints of the trials it will
continue. A half-copied folder or a full disk leaves empty or truncated files; Tune would
then start a new experiment in place of the sweep, and a trial would fail on its
checkpoint, each with a traceback.

- An unreadable file of Tune's state: one line naming it and what the user can do.
- An unreadable checkpoint of a trial to continue: the trial's Train run is set aside
  (`<trial id>.unreadable` beside it), so that it starts again from step 0 (Train keeps
  one checkpoint a trial, so there is no earlier one); `sweep resume` says so and tags the
  trial's MLflow run. A readable checkpoint is one whose JSON files parse, whose adapter's
  safetensors header reads and whose saved states (`torch.save`'s zip files) are whole.

Local sweep folders only; a sweep on object storage is read as Tune reads it."""

from __future__ import annotations

import json
import time
import pickletools
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError

__all__ = ["UnreadableCheckpoint", "check_study", "check_tune_state", "unreadable_checkpoints", "set_aside", "set_aside_for_rebuild",
           "forget_unfinished", "restart_unreadable_trials"]

UNREADABLE_SUFFIX = ".unreadable"


def _file_problem(path: Path) -> str | None:
    """Why `path` cannot be read, or None."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return exc.strerror or str(exc)
    if not data:
        return "empty"
    if path.suffix == ".json":
        try:
            json.loads(data)
        except ValueError as exc:
            return f"not JSON: {exc}"
    elif path.suffix == ".pkl":
        try:
            for _ in pickletools.genops(data):  # every opcode, to the last (STOP): a cut pickle fails
                pass
        except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and others on a cut file
            return f"not a whole pickle: {exc}"
    elif path.suffix in (".pt", ".pth"):
        if not zipfile.is_zipfile(path):
            return "not a whole torch.save file"
    elif path.suffix == ".safetensors":
        return _safetensors_problem(data)
    return None


def _safetensors_problem(data: bytes) -> str | None:
    if len(data) < 8:
        return "cut short"
    header_size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + header_size])
    except ValueError:
        return "its header does not read"
    end = max((tensor["data_offsets"][1] for key, tensor in header.items() if key != "__metadata__"), default=0)
    return "cut short" if len(data) < 8 + header_size + end else None


def check_tune_state(tune_folder: Path, name: str) -> None:
    """Every file of Tune's state in `tune_folder` (the sweep's `tune/`) reads.

    Raises:
        UserError: keyed by NAME, naming the first unreadable file and what to do.
    """
    files = [tune_folder / "tuner.pkl", *sorted(tune_folder.glob("experiment_state-*.json")),
             *sorted(tune_folder.glob("searcher-state-*.pkl"))]
    for path in files:
        if not path.is_file():
            continue
        problem = _file_problem(path)
        if problem:
            raise UserError(
                f"NAME: Tune's state {path} is unreadable ({problem}); restore the file from a copy, or rebuild the "
                f"sweep from its MLflow runs and Optuna study (finished trials kept, unfinished ones started again): "
                f"sweep resume {name} --rebuild"
            )


def check_study(study: Path, tune_folder: Path, name: str) -> None:
    """The Optuna study (SQLite) reads: SQLite's own check of its pages.

    Raises:
        UserError: keyed by NAME, naming the file and the copy Tune keeps with its state.
    """
    import sqlite3

    if not study.is_file():
        return
    try:
        with sqlite3.connect(f"file:{study}?mode=ro", uri=True) as connection:
            verdict = connection.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        copy = tune_folder / study.name
        restore = f"copy Tune's copy of it, {copy}, over it" if copy.is_file() else "restore it from a copy"
        raise UserError(f"NAME: the sweep's Optuna study {study} is unreadable ({verdict}); {restore}, then run "
                        f"sweep resume {name} again")


@dataclass(frozen=True)
class UnreadableCheckpoint:
    trial_id: str
    path: Path  # the first unreadable file
    problem: str

    def note(self, number: int | None) -> str:
        trial = f"trial {number}" if number is not None else f"trial {self.trial_id}"
        return f"{trial}: its checkpoint {self.path} is unreadable ({self.problem}); it starts again from step 0"


def unreadable_checkpoints(trials_folder: Path) -> list[UnreadableCheckpoint]:
    """The trials under `trials_folder` (one Train run folder per trial id) with a file
    that does not read in their Train run's state or checkpoints."""
    found = []
    if not trials_folder.is_dir():
        return found
    for run in sorted(p for p in trials_folder.iterdir() if p.is_dir() and not p.name.endswith(UNREADABLE_SUFFIX)):
        for path in sorted(p for p in run.rglob("*") if p.is_file()):
            if path.suffix not in (".json", ".pkl", ".pt", ".pth", ".safetensors"):
                continue
            problem = _file_problem(path)
            if problem:
                found.append(UnreadableCheckpoint(run.name, path, problem))
                break
    return found


def set_aside(trials_folder: Path, trial_id: str) -> Path:
    """Move a trial's Train run out of Train's way: the trial starts again from step 0."""
    run = trials_folder / trial_id
    target = run.with_name(run.name + UNREADABLE_SUFFIX)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    run.rename(target)
    return target


def set_aside_for_rebuild(storage_uri: str, trial_ids: list[str]) -> None:
    """`sweep resume --rebuild`: Tune's state set aside (`tune.unreadable-<time>`), and the
    Train runs of the trials `trial_ids` that start again from step 0."""
    tune = Path(storage_uri) / "tune"
    if tune.exists():
        tune.rename(tune.with_name(f"tune.unreadable-{time.strftime('%Y%m%d-%H%M%S')}"))
    trials_folder = Path(storage_uri) / "trials"
    for trial_id in trial_ids:
        if (trials_folder / trial_id).exists():
            set_aside(trials_folder, trial_id)


def forget_unfinished(search_alg, book, unfinished: list) -> None:
    """A rebuilt sweep's study checked against the book; the Optuna trials of the
    unfinished trials, started again as new trials, end here as failed."""
    import optuna

    from sweeper.search import optuna_searcher

    searcher = optuna_searcher(search_alg)
    if searcher is None:
        return
    searcher.reconcile(book)
    for record in unfinished:
        if record.trial_id in searcher.trials and record.trial_id not in searcher.finished:
            searcher.study.tell(searcher.trials[record.trial_id][0], state=optuna.trial.TrialState.FAIL)
            searcher.finished.add(record.trial_id)


def restart_unreadable_trials(spec, tracker, unreadable: list[UnreadableCheckpoint], console) -> None:
    """Trials to continue whose checkpoint does not read start again from step 0: said in
    the output, tagged on their run (Tag.RESTARTED), their book's curve begun anew. A
    finished trial's unreadable adapter is only said (promotion cannot use it)."""
    from rich.markup import escape

    from sweeper.cluster import storage
    from sweeper.names import Tag

    trials_folder = Path(storage.join(spec.storage_uri, "trials"))
    for problem in unreadable:
        record = tracker.book.trials.get(problem.trial_id)
        if record is not None and record.finished:
            console.print(f"[yellow]note:[/yellow] trial {record.number}: its adapter checkpoint "
                          f"{escape(str(problem.path))} is unreadable ({escape(problem.problem)})", soft_wrap=True)
            continue
        set_aside(trials_folder, problem.trial_id)
        console.print(f"[yellow]note:[/yellow] {escape(problem.note(record.number if record else None))}",
                      highlight=False, soft_wrap=True)
        if record is not None:
            record.history = []
            run_id = tracker.child_run_ids.get(problem.trial_id)
            if run_id:
                tracker.client.set_tag(run_id, Tag.RESTARTED, f"from step 0: checkpoint unreadable ({problem.problem})")
