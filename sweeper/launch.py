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
from sweeper.spec import SweepSpec, spec_to_yaml, with_overrides
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
    )
    url = context.dashboard_url
    return context, (f"http://{url}" if url and not url.startswith("http") else url)


def prepare_data(spec: SweepSpec, cache_root: Path) -> dict:
    """Tokenize train and eval once for the whole sweep (as the task needs them) and put
    them in the object store."""
    import ray

    from trainables.data import tokenize_split
    from trainables.models import adapter_base, load_tokenizer, resolve_model_source

    source = resolve_model_source(spec.model.name_or_path, cache_root)
    tokenizer = load_tokenizer(adapter_base(source) or source)
    data = {split: tokenize_split(spec, split, tokenizer) for split in ("train", "eval")}
    tokenizer.save_pretrained(spec.sweep_dir / "tokenizer")
    # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
    return {"ref": ray.put(data)}


def run_trial(config: dict, spec_json: dict, data: dict, cache_root: str) -> None:
    """One Tune trial: fit a TorchTrainer on this trial's config. Its workers' reports
    reach Tune (and ASHA) through TuneReportCallback."""
    from ray import tune
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    from trainables.worker import train_loop_per_worker

    started_at = time.time()
    spec = with_overrides(SweepSpec.model_validate(spec_json, context={"check_files": False}), config)
    resources = spec.resources
    per_worker = {"CPU": resources.cpus_per_worker}
    if resources.gpus_per_worker:
        per_worker["GPU"] = resources.gpus_per_worker
    trainer = TorchTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={
            "spec": spec.model_dump(mode="json"),
            "data": data,
            "cache_root": cache_root,
            "started_at": started_at,
        },
        scaling_config=ScalingConfig(
            num_workers=resources.workers_per_trial, use_gpu=resources.use_gpu, resources_per_worker=per_worker
        ),
        run_config=RunConfig(
            name=tune.get_context().get_trial_id(),
            storage_path=str(spec.sweep_dir / "trials"),
            callbacks=[TuneReportCallback()],
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    trainer.fit()


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
