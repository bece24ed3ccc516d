"""Launch: start (or join) the Ray cluster, prepare the data once, and run the Tune sweep
in which every trial is a Ray Train TorchTrainer."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from sweeper.errors import UserError
from sweeper.plan import ClusterResources, SweepPlan, make_plan
from sweeper.progress import BookKeeper, SweepBook
from sweeper.spec import SweepSpec, spec_to_yaml
from trainables.models import DEFAULT_CACHE_ROOT


@dataclass
class SweepRun:
    spec: SweepSpec
    plan: SweepPlan
    book: SweepBook
    dashboard_url: str | None
    wall_seconds: float


def prepare_sweep_dir(spec: SweepSpec, overwrite: bool) -> Path:
    """The sweep's folder, new. An existing sweep is never deleted unless asked."""
    sweep_dir = spec.sweep_dir
    if sweep_dir.exists() and any(sweep_dir.iterdir()):
        if not overwrite:
            raise UserError(
                f"name: a sweep named {spec.name!r} already exists in {sweep_dir}; "
                "pick a new name, or pass --overwrite to replace it"
            )
        shutil.rmtree(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec))
    return sweep_dir


# Ray Train and Tune settings for sweeps of many short trials. Ray reads them from the
# environment of the trial and Train controller processes, so they are given to every
# process of the sweep's Ray job (a job-level runtime_env, also when joining a cluster).
TRIAL_SETTINGS = {
    # The Train controller polls its workers this often: a report reaches Tune and ASHA,
    # and a finished run is noticed, at most this late (Ray's default: 2 s, which let a
    # pruned trial train on for seconds and left every finished trial's CPUs idle).
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    # A watcher actor per trial for node preemption: a sweep's trial is never restarted
    # (max_failures=0), so it would be a process per trial with nothing to do.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # How long Tune waits for a stopped trial's thread before reusing its actor; the
    # trial aborts its Train run first (sweeper/trial.py), which takes about a second.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "20",
}


def start_ray(address: str | None):
    """Join `address` (or RAY_ADDRESS), else start a local cluster with its dashboard.
    The dashboard stays on: besides monitoring, Ray Train's placement-group cleanup
    needs it (without it finished trials kept their resources and sweeps hung)."""
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context(), None
    context = ray.init(
        address=address,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        log_to_driver=False,
        logging_level="WARNING",
        configure_logging=True,
        runtime_env={"env_vars": TRIAL_SETTINGS},
    )
    url = context.dashboard_url
    return context, (f"http://{url}" if url and not url.startswith("http") else url)


def prepare_data(spec: SweepSpec, cache_root: Path) -> dict:
    """Tokenize train and eval once for the whole sweep and put them in the object store."""
    import ray

    from trainables.data import tokenize_sft
    from trainables.models import adapter_base, load_tokenizer, resolve_model_source

    source = resolve_model_source(spec.model.name_or_path, cache_root)
    tokenizer = load_tokenizer(adapter_base(source) or source)
    data = {
        "train": tokenize_sft(spec.data.train, tokenizer, spec.data.max_length, "data.train"),
        "eval": tokenize_sft(spec.data.eval, tokenizer, spec.data.max_length, "data.eval"),
    }
    tokenizer.save_pretrained(spec.sweep_dir / "tokenizer")
    # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
    return {"ref": ray.put(data)}


def run_sweep(
    spec: SweepSpec,
    *,
    address: str | None = None,
    overwrite: bool = False,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
    extra_callbacks: list | None = None,
) -> SweepRun:
    from ray import tune

    from sweeper.console import LiveTable
    from sweeper.search import make_scheduler, make_searcher
    from sweeper.trial import run_trial

    console = console or Console()
    started = time.time()
    sweep_dir = prepare_sweep_dir(spec, overwrite)
    _, dashboard_url = start_ray(address)
    plan = make_plan(spec, ClusterResources.from_ray())
    console.print(f"Ray dashboard: {dashboard_url or 'not available'}")
    console.print(
        f"Sweep {spec.name!r}: {spec.search.num_trials} trials, {plan.concurrent_trials} at a time "
        f"({plan.trial_resources.workers} worker(s) per trial), files in {sweep_dir}"
    )
    data = prepare_data(spec, cache_root)

    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    param_names = list(spec.search.parameters)
    trainable = tune.with_parameters(
        run_trial, spec_json=spec.model_dump(mode="json"), data=data, cache_root=str(cache_root)
    )
    # The trial's own process only waits on its TorchTrainer; the workers hold the CPUs
    # and GPUs. A token memory request keeps its bundle non-empty.
    trainable = tune.with_resources(trainable, {"cpu": 0, "memory": 1024**2})
    with LiveTable(book, param_names, console) as live_table:
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=make_searcher(spec, sweep_dir),
                scheduler=make_scheduler(spec),
                num_samples=spec.search.num_trials,
                max_concurrent_trials=plan.concurrent_trials,
                # A trial's actor runs the next trial (run_trial aborts its Train run
                # when Tune stops it), instead of a new process importing torch per trial.
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name="tune",
                storage_path=str(sweep_dir),
                callbacks=[BookKeeper(book), *(extra_callbacks or []), live_table],
                verbose=0,
            ),
        )
        tuner.fit()
    return SweepRun(spec, plan, book, dashboard_url, time.time() - started)
