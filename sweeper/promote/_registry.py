"""Promotion: hand a sweep's winner to the MLflow Model Registry.

`promote_trial` registers one trial (the sweep's best, or the one named) as a new version
of a registered model and points an alias at it, in three steps: check (reads only: the
trial and its state, its adapter checkpoint, the sweep's tokenizer, the model name and
alias, a store with a Model Registry), build (in a temporary folder: adapter, tokenizer,
best_config.yaml, metrics.json, with merge the merged weights), write (a promotion run
logs the model as MLflow pyfunc, code in trainables/served_model.py; a new version is
created from it, tagged, and the alias set). Bad input stops at the first step, a base
model that cannot be loaded at the second: nothing is written.

The promotion run is nested under the trial's run rather than being it: the trial's run
is the record of training (status, end time, cost), and each promotion keeps its own run,
logged model and version, nothing overwritten.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import warnings
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import trainables
from sweeper.cluster import storage
from sweeper.errors import UserError
from sweeper.names import RunKind, RunMetric, Tag, TrialState, VersionTag
from sweeper.spec import SweepSpec, spec_to_yaml
from sweeper.track import SweepStore
from trainables.metrics import EVAL_LOSS, REPORTED_KEYS

__all__ = ["Candidate", "Promotion", "check_candidate", "promote_trial"]

# The model's code (MLflow "model from code") and the package it imports, shipped with it
# so that a version loads the way it was promoted, whatever this checkout becomes.
TRAINABLES_CODE = Path(trainables.__file__).resolve().parent
SERVED_MODEL_CODE = TRAINABLES_CODE / "served_model.py"
SERVING_PACKAGES = ("torch", "transformers", "peft", "tokenizers", "safetensors", "filelock")
PROMOTABLE_STATE = TrialState.COMPLETED


@dataclass(frozen=True)
class Candidate:
    """A trial that passed every check: what promotion will register."""

    sweep: str
    parent: object  # the sweep's parent run, an MLflow Run as SweepStore returns it
    trial: dict  # a SweepStore.trials() row
    spec: SweepSpec  # the trial's values as one full run (best_config.yaml)
    adapter_dir: str  # a folder, or s3://... (the sweep's storage.uri)
    tokenizer_dir: str

    @property
    def metric(self) -> str:
        return self.parent.data.tags.get(Tag.METRIC, EVAL_LOSS)

    @property
    def metric_text(self) -> str:
        value = self.trial["metric"]
        return "none" if value is None else f"{value:.6g}"

    @property
    def params(self) -> dict[str, str]:
        return json.loads(self.trial["params"])


@dataclass(frozen=True)
class Promotion:
    """What a promotion registered."""

    model_name: str
    version: str
    alias: str
    previous_version: str | None  # the version that held the alias before, if any
    run_id: str  # the promotion run
    candidate: Candidate
    merged: bool

    @property
    def uri(self) -> str:
        return f"models:/{self.model_name}@{self.alias}"


# ---------------------------------------------------------------- 1. check (reads only)


def check_candidate(store: SweepStore, sweep: str, trial_ref: str | None, force: bool = False) -> Candidate:
    """The trial to promote, checked: it exists, it completed (or force), its adapter
    checkpoint and the sweep's tokenizer are on disk."""
    parent = store.sweep_run(sweep)
    trial = store.trial(parent, trial_ref)
    refusal = state_refusal(trial, int(parent.data.tags.get(Tag.MAX_STEPS, 0)))
    if refusal and not force:
        raise UserError(f"--trial: {refusal}; pass --force to promote it anyway")
    return Candidate(
        sweep=sweep,
        parent=parent,
        trial=trial,
        spec=store.trial_spec(parent, trial),
        adapter_dir=adapter_dir(trial),
        tokenizer_dir=tokenizer_dir(parent),
    )


def state_refusal(trial: dict, max_steps: int) -> str | None:
    """Why a trial in this state should not be promoted, or None for a completed one."""
    number, state, steps = trial["trial_number"], trial["state"], trial["steps"]
    if state == PROMOTABLE_STATE:
        return None
    if state == TrialState.PRUNED:
        return (
            f"trial {number} was pruned at step {steps} of {max_steps} (early stopping judged it "
            "behind the others), so its adapter is under-trained"
        )
    if state == TrialState.FAILED:
        return f"trial {number} {trial['status']}"
    if state == TrialState.STOPPED:
        return f"trial {number} was stopped at step {steps} of {max_steps} when its sweep was interrupted"
    return f"trial {number} is {state} (status {trial['status']!r}), not completed"


def adapter_dir(trial: dict) -> str:
    """The trial's latest adapter checkpoint, as Ray Train wrote it in the sweep's storage
    (a folder, or s3://... read from here)."""
    path = trial.get("checkpoint_path")
    number = trial["trial_number"]
    if not path:
        raise UserError(
            f"--trial: trial {number} has no adapter checkpoint (it ended before its first evaluation)"
        )
    if not _readable(storage.join(path, "adapter_config.json")):
        raise UserError(
            f"--trial: the adapter checkpoint of trial {number} is not at {path} (sweep storage moved, "
            "deleted, or on another machine's disk); promote where it is, or give the sweep storage.uri: s3://..."
        )
    return path


def tokenizer_dir(parent) -> str:
    """The sweep's tokenizer: beside its checkpoints in storage.uri (copied there at the
    start), else in the sweep folder."""
    tags = parent.data.tags
    root = tags.get(Tag.STORAGE_URI) or tags.get(Tag.SWEEP_DIR, "")
    folder = storage.join(root, "tokenizer")
    if not _readable(storage.join(folder, "tokenizer_config.json")):
        raise UserError(
            f"NAME: the sweep's tokenizer is not at {folder} (sweep storage moved, deleted, or on another "
            "machine's disk); promote where it is"
        )
    return folder


def _readable(uri: str) -> bool:
    """Whether the file at `uri` is there; storage that cannot be reached (no
    credentials, no endpoint) counts as not there, and the caller says where it looked."""
    try:
        return storage.exists(uri)
    except OSError:
        return False


# MLflow's documented rules for a registered model's name and a version's alias. MLflow
# checks them only when a name or alias is written, after the model was logged: checked
# here first, a bad name costs nothing. tests/unit/test_registry_names.py holds them
# against the installed MLflow's own refusals.
ALIAS_CHARACTERS = re.compile(r"[\w-]+")
VERSION_ALIAS = re.compile(r"[vV]\d+")
MAX_ALIAS_LENGTH = 255


def model_name_problem(name: str) -> str | None:
    """What MLflow would refuse in `name` as a registered model's name, or None."""
    if not name.strip():
        return "a registered model's name cannot be empty"
    if "/" in name or ":" in name:
        return "a registered model's name cannot contain '/' or ':'"
    return None


def alias_problem(alias: str) -> str | None:
    """What MLflow would refuse in `alias` as a model version's alias, or None."""
    if not ALIAS_CHARACTERS.fullmatch(alias):
        return "an alias may only contain letters, digits, '_' and '-'"
    if len(alias) > MAX_ALIAS_LENGTH:
        return f"an alias is at most {MAX_ALIAS_LENGTH} characters"
    if alias.lower() == "latest" or VERSION_ALIAS.fullmatch(alias):
        return "'latest' and version names such as 'v3' are reserved by MLflow"
    return None


def check_registry(client, model_name: str, alias: str) -> None:
    """The model name and alias are valid and the store has a Model Registry (reads only)."""
    from mlflow.exceptions import MlflowException

    problems = []
    if (problem := model_name_problem(model_name)) is not None:
        problems.append(f"--model-name: {problem} (got {model_name!r})")
    if (problem := alias_problem(alias)) is not None:
        problems.append(f"--alias: {problem} (got {alias!r})")
    if problems:
        raise UserError(*problems)
    try:
        client.search_registered_models(max_results=1)
    except MlflowException as exc:
        first_line = str(exc.message).splitlines()[0][:200]
        raise UserError(
            f"--tracking-uri: this MLflow store has no usable Model Registry ({first_line}); use a "
            "database-backed store (sqlite:///mlflow.db) or an mlflow server with a database backend"
        ) from None


# ---------------------------------------------------------------- 2. build (local files)

# The adapter as peft saves it (peft's CONFIG_NAME and SAFETENSORS_WEIGHTS_NAME). The rest
# of a checkpoint folder (optimizer and schedule, random state, DeepSpeed's partitions) is
# for continuing training, not for serving: it stays out of the registered model.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def build_artifacts(store: SweepStore, candidate: Candidate, folder: Path, merge: bool) -> dict[str, str]:
    """The model's artifacts in `folder`, keyed as the served model reads them."""
    artifacts = {
        "adapter": download_adapter(candidate.adapter_dir, folder / "adapter"),
        "tokenizer": storage.download(candidate.tokenizer_dir, folder / "tokenizer"),
        "config": folder / "best_config.yaml",
        "metrics": folder / "metrics.json",
    }
    artifacts["config"].write_text(spec_to_yaml(candidate.spec))
    artifacts["metrics"].write_text(json.dumps(trial_metrics(store, candidate), indent=1))
    if merge:
        artifacts["merged"] = merge_adapter(candidate, artifacts["adapter"], artifacts["tokenizer"], folder / "merged")
    return {key: str(path) for key, path in artifacts.items()}


def download_adapter(checkpoint_dir: str, target: Path) -> Path:
    """The adapter's files of a trial's checkpoint, from its storage, into `target`."""
    for name in ADAPTER_FILES:
        storage.download(storage.join(checkpoint_dir, name), target)
    return target


def trial_metrics(store: SweepStore, candidate: Candidate) -> dict:
    """The trial's final metrics (as its child run holds them) and the reported histories."""
    run = store.client.get_run(candidate.trial["run_id"])
    history = {}
    for key in REPORTED_KEYS:
        points = store.client.get_metric_history(run.info.run_id, key)
        if points:
            history[key] = [[p.step, p.value] for p in sorted(points, key=lambda p: p.step)]
    return {"final": dict(run.data.metrics), "history": history}


def merge_adapter(candidate: Candidate, adapter: Path, tokenizer: Path, target: Path) -> Path:
    """The adapter folded into its base (peft merge_and_unload): a standalone model folder."""
    from peft import PeftModel

    from trainables.models import load_base_model, load_tokenizer, resolve_model_source

    model_spec, precision = candidate.spec.model, candidate.spec.training.precision
    base = load_base_model(resolve_model_source(model_spec.name_or_path), precision)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(target)
    load_tokenizer(str(tokenizer)).save_pretrained(target)
    return target


# ---------------------------------------------------------------- 3. write


def promote_trial(
    store: SweepStore,
    sweep: str,
    trial_ref: str | None = None,
    model_name: str | None = None,
    alias: str = "champion",
    merge: bool = False,
    force: bool = False,
) -> Promotion:
    """Register a trial of `sweep` as a new version of `model_name` (default: the sweep's
    name) and point `alias` at it. Every check runs before anything is written."""
    model_name = model_name or sweep
    candidate = check_candidate(store, sweep, trial_ref, force)
    check_registry(store.client, model_name, alias)
    with tempfile.TemporaryDirectory(prefix="sweeper-promote-") as folder:
        artifacts = build_artifacts(store, candidate, Path(folder), merge)
        run_id, model_uri, model_id = log_model(store, candidate, artifacts)
    # The registry looks the logged model up through MLflow's global tracking URI, which
    # is this folder's default store unless set: from another folder it found no model.
    with _tracking_uri(store.uri):
        return register(store, candidate, run_id, model_uri, model_id, model_name, alias, merge, force)


def log_model(store: SweepStore, candidate: Candidate, artifacts: dict[str, str]) -> tuple[str, str, str]:
    """A promotion run under the trial's child run, holding the logged model."""
    import mlflow
    from mlflow.models import infer_signature

    trial, parent = candidate.trial, candidate.parent
    run = store.client.create_run(
        parent.info.experiment_id,
        run_name=f"{candidate.sweep}-trial-{trial['trial_number']}-promotion",
        tags={
            Tag.PARENT_RUN_ID: trial["run_id"],
            Tag.KIND: RunKind.PROMOTION,
            Tag.SOURCE_SWEEP: candidate.sweep,
            Tag.SOURCE_PARENT_RUN_ID: parent.info.run_id,
            Tag.SOURCE_TRIAL_RUN_ID: trial["run_id"],
            Tag.SOURCE_TRIAL_ID: trial["trial_id"],
            Tag.SOURCE_TRIAL_NUMBER: str(trial["trial_number"]),
        },
    )
    final = json.loads(Path(artifacts["metrics"]).read_text())["final"]
    signature = infer_signature(["a prompt"], ["generated text"], params={"max_new_tokens": 32, "chat": False})
    with _tracking_uri(store.uri), mlflow.start_run(run_id=run.info.run_id), warnings.catch_warnings():
        # MLflow's hint to log an input example does not apply: the signature is given,
        # and an example would make it load the base model here just to check it.
        warnings.simplefilter("ignore", UserWarning)
        mlflow.log_params(candidate.params)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(SERVED_MODEL_CODE),
            artifacts=artifacts,
            code_paths=[str(TRAINABLES_CODE)],
            model_config={
                "base_model": candidate.spec.model.name_or_path,
                "precision": candidate.spec.training.precision,
            },
            signature=signature,
            pip_requirements=pinned_requirements(),
            model_type="lora-adapter",
        )
        mlflow.log_metrics(final, step=candidate.trial["steps"] or 0, model_id=info.model_id)
    return run.info.run_id, info.model_uri, info.model_id


def register(store, candidate: Candidate, run_id, model_uri, model_id, model_name, alias, merge, force) -> Promotion:
    """A new version of `model_name` from the logged model, tagged; `alias` points at it."""
    from mlflow.exceptions import MlflowException

    client = store.client
    try:
        previous = client.get_registered_model(model_name).aliases.get(alias)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(model_name, description="LoRA adapters promoted from sweeper sweeps.")
        previous = None
    tags = version_tags(candidate, run_id, merge, force)
    version = client.create_model_version(
        model_name, source=model_uri, run_id=run_id, tags=tags, description=describe(candidate), model_id=model_id
    )
    client.set_registered_model_alias(model_name, alias, version.version)
    client.set_tag(run_id, Tag.REGISTERED_MODEL, f"{model_name}/{version.version}")
    return Promotion(model_name, str(version.version), alias, previous, run_id, candidate, merge)


def version_tags(candidate: Candidate, run_id: str, merge: bool, force: bool) -> dict[str, str]:
    trial, parent = candidate.trial, candidate.parent
    sweep_cost = parent.data.metrics.get(RunMetric.COST_USD_TOTAL)
    tags = {
        VersionTag.SWEEP: candidate.sweep,
        Tag.TRIAL_NUMBER: str(trial["trial_number"]),
        Tag.TRIAL_ID: trial["trial_id"],
        VersionTag.TRIAL_STATE: trial["state"],
        Tag.METRIC: candidate.metric,
        VersionTag.METRIC_VALUE: repr(trial["metric"]),
        Tag.GOAL: parent.data.tags.get(Tag.GOAL, "minimize"),
        VersionTag.STEPS: str(trial["steps"]),
        VersionTag.COST_USD: repr(trial["cost_usd"]),
        VersionTag.SWEEP_COST_USD: repr(sweep_cost),
        VersionTag.BASE_MODEL: candidate.spec.model.name_or_path,
        VersionTag.PARENT_RUN_ID: parent.info.run_id,
        VersionTag.TRIAL_RUN_ID: trial["run_id"],
        VersionTag.PROMOTION_RUN_ID: run_id,
        VersionTag.MERGED: str(merge).lower(),
    }
    if force and trial["state"] != PROMOTABLE_STATE:
        tags[VersionTag.FORCED] = "true"
    return tags


def describe(candidate: Candidate) -> str:
    trial = candidate.trial
    return (
        f"Sweep {candidate.sweep!r}, trial {trial['trial_number']} ({trial['status']}): "
        f"{candidate.metric}={candidate.metric_text} after {trial['steps']} steps, "
        f"cost ${trial['cost_usd'] or 0:.6f}. Config: best_config.yaml in the model's artifacts."
    )


def pinned_requirements() -> list[str]:
    """What loading the model needs, at the versions that trained it (local build tags
    such as +cpu dropped, so a GPU host can install its own build)."""
    pins = []
    for package in SERVING_PACKAGES:
        try:
            pins.append(f"{package}=={version(package).split('+')[0]}")
        except PackageNotFoundError:
            pins.append(package)
    return pins


@contextlib.contextmanager
def _tracking_uri(uri: str):
    """MLflow's model logging reads the global tracking URI: set it for this block only."""
    import mlflow

    before_tracking, before_registry = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before_tracking)
        mlflow.set_registry_uri(before_registry)
