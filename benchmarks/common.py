"""What the three benchmarks share: the benchmark sweep (the quickstart's model, data and
batch, with sections overridden), the same training loop run in one plain process, the
machine line, and the table every benchmark prints."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sweeper.spec import SweepSpec, read_yaml, validate_spec

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "search_spaces" / "quickstart.yaml"


def bench_spec(name: str, output_dir: Path | None = None, yaml: Path = QUICKSTART, **sections) -> SweepSpec:
    """The quickstart sweep (built-in model, shipped data, its batch and length), or another
    shipped sweep of search_spaces/ (`yaml`), with `sections` merged over it, writing into
    `output_dir` (a new temporary folder if None)."""
    raw = read_yaml(yaml)
    raw["name"] = name
    # These benchmarks time the trials (the sweep's clock starts after the forecast), not
    # the forecast: no calibration before each sweep (benchmarks.forecast calibrates).
    raw["cost"] = {**raw.get("cost", {}), "calibrate": False}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    output_dir = output_dir or Path(tempfile.mkdtemp(prefix=f"sweeper-bench-{name}-"))
    raw["output_dir"] = str(output_dir)
    # Its own MLflow store, not the one of the folder the benchmark is run from.
    raw.setdefault("tracking", {})["uri"] = f"sqlite:///{output_dir}/mlflow.db"
    return validate_spec(raw, base_dir=yaml.parent, source=str(yaml))


def run_bench_sweep(spec: SweepSpec, extra_callbacks: list | None = None, address: str | None = None):
    """The sweep as `sweep start` runs it, without its terminal output; on its own local
    cluster, or joining `address`."""
    from sweeper.run import run_sweep

    return run_sweep(
        spec, yaml_folder=QUICKSTART.parent, console=Console(quiet=True), extra_callbacks=extra_callbacks, address=address
    )


@dataclass
class PlainRun:
    """One run of the training loop in this process, without Ray."""

    reports: list[dict]
    setup_seconds: float
    loop_seconds: float  # first optimizer step to the end, evaluations and checkpoints included
    steps: int

    @property
    def seconds_per_step(self) -> float:
        return self.loop_seconds / max(1, self.steps - 1)

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.reports)


def plain_run(spec: SweepSpec, cache_root: Path | None = None, start_together=None, with_generation: bool = False) -> PlainRun:
    """`trainables.sft.train` in this process, as a trial's worker runs it (same thread
    count, same tokenized data), with a report callable that only records.
    `start_together` (a multiprocessing Barrier) lines up the training of copies run
    side by side (`plain_side_by_side`). `with_generation`: the trial also answers the
    sweep's generation sample (spec.generation) at the steps it names."""
    import torch

    from trainables.data import tokenize_sft
    from trainables.models import DEFAULT_CACHE_ROOT, load_tokenizer, resolve_model_source
    from trainables.sft import train

    source = resolve_model_source(spec.model.name_or_path, cache_root or DEFAULT_CACHE_ROOT)
    tokenizer = load_tokenizer(source)
    data = {
        "train": tokenize_sft(spec.data.train, tokenizer, spec.data.max_length, "data.train"),
        "eval": tokenize_sft(spec.data.eval, tokenizer, spec.data.max_length, "data.eval"),
    }
    if with_generation:
        from sweeper.plan._inputs import generation_sample

        data["generation"] = generation_sample(spec, tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    reports: list[dict] = []
    if start_together is not None:
        start_together.wait()
    try:
        started = time.time()
        train(spec, data, source, report=lambda metrics, checkpoint: reports.append(metrics), started_at=started)
        ended = time.time()
    finally:
        torch.set_num_threads(threads)
    setup = reports[0]["setup_seconds"]
    return PlainRun(reports, setup, ended - started - setup, spec.training.max_steps)


def plain_side_by_side(spec: SweepSpec, copies: int) -> list[PlainRun]:
    """`copies` plain runs at once, each in its own process, their training started
    together: the step time a sweep of `copies` concurrent trials can reach at best on
    this machine, where cores may share caches, memory bandwidth or a hypervisor's
    time and so run slower side by side than one alone."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(copies, mp_context=context) as pool:
        barrier = manager.Barrier(copies)
        futures = [pool.submit(plain_run, spec, None, barrier) for _ in range(copies)]
        return [future.result() for future in futures]


def tokens_per_second(reports: list[dict]) -> float:
    """Training tokens over training seconds across reports (evaluation excluded)."""
    tokens = sum(r["train_tokens"] for r in reports)
    seconds = sum(r["train_tokens"] / r["tokens_per_second"] for r in reports)
    return tokens / seconds


def tokens_per_cpu_second(reports: list[dict]) -> float:
    """Training tokens over the training thread's CPU seconds across reports (one worker):
    unlike tokens/s, it does not fall when other processes or the hypervisor take the
    thread's core, only when the loop itself does more work per token."""
    tokens = sum(r["train_tokens"] for r in reports)
    cpu_seconds = sum(r["train_cpu_share"] * r["train_tokens"] / r["tokens_per_second"] for r in reports)
    return tokens / cpu_seconds


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), interpolated; the value itself for a single one."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def machine() -> str:
    """One line naming the machine and the stack the figures were taken on."""
    import ray
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB, {gpu}; load {load}; "
        f"python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}; "
        f"commit {_commit()}"
    )


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
        return out.stdout.strip() + ("+dirty" if dirty.strip() else "")
    except OSError:
        return "unknown"


def print_figures(title: str, rows: list[tuple[str, str, str]], console: Console | None = None) -> None:
    """A figure / value / note table, then the machine line."""
    console = console or Console()
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("how / target")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"machine: {machine()}")


def save_json(path: Path | None, figures: dict) -> None:
    if path:
        Path(path).write_text(json.dumps({**figures, "machine": machine()}, indent=2))
