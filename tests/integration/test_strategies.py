"""Real-size trial strategies on CPUs, with the tiny model: DeepSpeed ZeRO-2/3 and FSDP
over gloo with 2 workers. SFT losses of ZeRO-2 and FSDP match DDP's step by step, with
and without gradient checkpointing; DPO losses and rewards of ZeRO-2, ZeRO-3 and FSDP
match DDP's. All the runs of a test are trained in turn by one pair of processes (one
import of the training stack, not one per run); each builds its own model, strategy and
optimizer, as a trial's Train run does. (Sweeps per strategy, with kill -9 and resume:
tests/integration/test_strategy_sweeps.py.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.conftest import REPO, small_dpo_sweep, small_sweep

pytestmark = pytest.mark.integration


def _train_in_two_processes(rank: int, task: str, runs: list[dict], out: str, port: int) -> None:
    """Each of `runs` (overrides of the trial config) trained in turn by the same 2
    processes: one process group and one import of the training stack for all of them.
    Each run builds its own model, strategy and optimizer, as a trial's Train run does."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    import importlib

    from sweeper.spec._load import validate_spec
    from trainables.data import tokenize_split
    from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source

    sweep = small_dpo_sweep if task == "dpo" else small_sweep
    spec = validate_spec(sweep("s", early_stopping={"scheduler": "none"}), base_dir=REPO)
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    tokenizer = load_tokenizer(source)
    task_module = importlib.import_module(f"trainables.{task}")
    # The runs differ in strategy and checkpointing only: the data is tokenized once.
    data = {split: tokenize_split(spec.trial_config(), split, tokenizer) for split in ("train", "eval")}
    every_run = []
    for overrides in runs:
        values = {"training.max_steps": STEPS[task], "training.eval_every": 1, **overrides}
        trial = spec.trial_config().with_values(values)
        reports = []
        task_module.train(trial, data, source, lambda metrics, checkpoint: reports.append(metrics), time.time())
        every_run.append(reports)
    if rank == 0:
        Path(out).write_text(json.dumps(every_run))
    dist.destroy_process_group()


# Steps of each run: 20 for SFT (the target), fewer for DPO (two forwards a step).
STEPS = {"sft": 20, "dpo": 6}


def reports(tmp_path, task: str, runs: dict[str, dict]) -> dict[str, list[dict]]:
    """For each named run (its overrides), the report of every step of a 2-worker run of
    `task` (same seed every run), all trained by one pair of processes."""
    out = tmp_path / "reports.json"
    mp.spawn(_train_in_two_processes, args=(task, list(runs.values()), str(out), 29500 + os.getpid() % 400), nprocs=2)
    return dict(zip(runs, json.loads(out.read_text()), strict=True))


def test_zero2_and_fsdp_losses_match_ddp_and_checkpointing_changes_none(tmp_path):
    runs = reports(tmp_path, "sft", {
        "ddp": {},
        "ddp+checkpointing": {"training.gradient_checkpointing": True},
        "fsdp": {"resources.strategy": "fsdp"},
        "zero2": {"resources.strategy": "deepspeed"},
        "zero2+checkpointing": {"resources.strategy": "deepspeed", "training.gradient_checkpointing": True},
    })
    losses = {name: [report["train_loss"] for report in run] for name, run in runs.items()}
    ddp = losses.pop("ddp")
    assert len(ddp) == 20 and ddp[-1] < ddp[0]
    for name, run in losses.items():
        assert max(abs(a - b) for a, b in zip(run, ddp, strict=True)) < 1e-3, (name, run, ddp)


DPO_METRICS = ("train_loss", "eval_loss", "eval_rewards_chosen", "eval_rewards_rejected", "eval_rewards_accuracy")


def test_dpo_under_zero2_zero3_and_fsdp_matches_ddp(tmp_path):
    """DPO's reference is the policy with its adapters disabled: under ZeRO-3 and FSDP that
    forward gathers the sharded base weights like the policy's own."""
    strategies = (("fsdp", 2), ("deepspeed", 2), ("deepspeed", 3))  # ZeRO-3, which patches module init, last
    runs = reports(tmp_path, "dpo", {
        "ddp": {},
        **{
            (strategy, stage): {"resources.strategy": strategy, "resources.deepspeed": {"zero_stage": stage}}
            for strategy, stage in strategies
        },
    })
    ddp = runs.pop("ddp")
    assert len(ddp) == STEPS["dpo"] and ddp[-1]["eval_loss"] < ddp[0]["eval_loss"], ddp
    for (strategy, stage), run in runs.items():
        for name in DPO_METRICS:
            ours, theirs = [r[name] for r in run], [r[name] for r in ddp]
            assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3, (strategy, stage, name, ours, theirs)


def test_calibration_steps_deepspeed_and_fsdp_in_this_process():
    """Calibration measures in a process (a Ray task) that no launcher made part of a
    process group; DeepSpeed's engine and FSDP step only inside one (a group of one here)."""
    from sweeper.plan._calibrate import measure
    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import validate_spec
    from trainables.models import BUILTIN_TINY_MODEL, DEFAULT_CACHE_ROOT, resolve_model_source

    source = resolve_model_source(BUILTIN_TINY_MODEL)
    for resources in ({"strategy": "deepspeed", "deepspeed": {"zero_stage": 3}}, {"strategy": "fsdp"}):
        spec = validate_spec(small_sweep("c", resources={"workers_per_trial": 2, **resources}), base_dir=REPO)
        data = prepare_inputs(spec, DEFAULT_CACHE_ROOT).data
        timing = measure(spec, data, source)
        assert timing.step_seconds > 0 and timing.eval_seconds > 0 and timing.setup_seconds > 0, resources
