"""`sweep resume NAME --storage URI`: a sweep resumed where its folder is gone (another
machine, another folder, a Ray Job's fresh working_dir) from what its storage.uri holds:
the sweep.yaml published when it started (sweeper/run/_sweep_dir.py), Tune's state and every
checkpoint, and the copy of the Optuna study that each of Tune's experiment checkpoints
uploads beside Tune's own state (`tune/optuna.db`, sweeper/search/_searcher.py). They are fetched
into a local sweep folder, which `sweep resume` then continues like any other.

Ray is not loaded here: the resume that follows sets Ray's authentication mode in the
environment, which Ray reads when it is first imported."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sweeper.cluster import storage
from sweeper.errors import UserError
from sweeper.search import STUDY_FILE, study_file
from sweeper.spec import uri_problem

__all__ = ["FetchedSweep", "fetch_sweep", "normalized_uri"]


@dataclass
class FetchedSweep:
    folder: Path
    notes: list[str] = field(default_factory=list)


def normalized_uri(uri: str) -> str:
    """`uri` as storage.uri keeps it (no trailing slash; a folder resolved)."""
    return uri.rstrip("/") if storage.is_remote(uri) else str(Path(uri).resolve())


def fetch_sweep(name: str, uri: str, folder: Path) -> FetchedSweep:
    """Fill `folder` with sweep `name` from its storage at `uri`: its sweep.yaml, with
    `folder` as its output_dir and `uri` as its storage.uri, and the Optuna study of
    Tune's last experiment checkpoint (which matches the Tune state resumed from
    there; what the killed driver did after it, MLflow tells the resumed one).

    Raises:
        UserError: `uri` is no sweep storage or holds another sweep; `folder` cannot be
        written, holds another sweep, or this one with its driver still running.
    """
    from sweeper.folders import folder_creation_problem
    from sweeper.spec import load_spec, spec_to_yaml

    problem = uri_problem(uri)
    if problem:
        raise UserError(f"--storage: {problem}")
    uri, folder = normalized_uri(uri), Path(folder).resolve()
    unwritable = folder_creation_problem(folder)
    if unwritable:
        raise UserError(f"--sweep-dir: {unwritable}; give a folder you can write to")
    published = _read(storage.join(uri, "sweep.yaml"))
    if published is None:
        raise UserError(
            f"--storage: no sweep at {uri} (no sweep.yaml there); give the storage.uri of the sweep's YAML, "
            "where its tune/ and trials/ folders are"
        )
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "sweep.yaml").write_bytes(published)
        spec = load_spec(Path(scratch) / "sweep.yaml")
    if spec.name != name:
        raise UserError(f"NAME: the sweep at {uri} is named {spec.name!r}, not {name!r}; give NAME {spec.name}")
    _refuse_another_sweep(folder, uri)

    folder.mkdir(parents=True, exist_ok=True)
    here = spec.model_copy(update={"output_dir": folder, "storage": spec.storage.model_copy(update={"uri": uri})})
    (folder / "sweep.yaml").write_text(spec_to_yaml(here))
    fetched = FetchedSweep(folder)
    study = _read(storage.join(uri, "tune", STUDY_FILE))
    if study is not None:
        partial = folder / f".{STUDY_FILE}.partial"
        partial.write_bytes(study)
        partial.replace(study_file(folder))
    elif spec.search.parameters:
        fetched.notes.append(
            f"{uri} holds no copy of the Optuna study yet (Tune saved no experiment checkpoint with one); "
            "the search continues with a new study"
        )
    return fetched


def _read(uri: str) -> bytes | None:
    """The bytes of the file at `uri`, None when there is none.

    Raises:
        UserError: keyed `--storage`, when the storage cannot be read at all.
    """
    import pyarrow.fs

    try:
        fs, path = storage.filesystem(uri)
        if fs.get_file_info(path).type != pyarrow.fs.FileType.File:
            return None
        with fs.open_input_stream(path) as stream:
            return stream.read()
    except OSError as exc:  # pyarrow's text names the SDK's reason, never a secret
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"--storage: cannot read {uri} ({reason}); check the bucket and, for s3://, "
            "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        ) from None


def _refuse_another_sweep(folder: Path, uri: str) -> None:
    """The local folder may hold this sweep from before (its files are replaced by the
    ones in storage), never another sweep, nor this one while its driver runs."""
    from sweeper.run._sweep_dir import running_driver_pid
    from sweeper.spec import load_spec

    if not (folder / "sweep.yaml").is_file():
        return
    there = load_spec(folder / "sweep.yaml")
    if there.storage_uri != uri:
        raise UserError(
            f"--sweep-dir: {folder} holds a sweep whose storage is {there.storage_uri}, not {uri}; "
            "give another --sweep-dir (or leave --storage out to resume the sweep in that folder)"
        )
    pid = running_driver_pid(there)
    if pid is not None:
        raise UserError(f"NAME: sweep {there.name!r} is still running (driver pid {pid}); stop it first: sweep stop {there.name}")
