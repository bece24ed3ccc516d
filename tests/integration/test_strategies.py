"""Real-size trial strategies on CPUs, with the tiny model: DeepSpeed ZeRO-2/3 and FSDP
over gloo with 2 workers. SFT losses of ZeRO-2 and FSDP match DDP's step by step, with
and without gradient checkpointing; DPO losses and rewards of ZeRO-2, ZeRO-3 and FSDP
match DDP's. (2-trial sweeps per strategy, with kill -9 of the driver and `sweep
resume`: tests/integration/test_strategy_sweeps.py.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.conftest import REPO, small_dpo_sweep, small_sweep

pytestmark = pytest.mark.integration


def _train_in_two_processes(rank: int, task: str, overrides: dict, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    import importlib

    from sweeper.spec.load import validate_spec
    from trainables.data import tokenize_split
    from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source

    sweep = small_dpo_sweep if task == "dpo" else small_sweep
    spec = validate_spec(sweep("s", early_stopping={"scheduler": "none"}), base_dir=REPO)
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    tokenizer = load_tokenizer(source)
    steps = STEPS[task]
    trial = spec.trial_config().with_values({"training.max_steps": steps, "training.eval_every": 1, **overrides})
    data = {split: tokenize_split(trial, split, tokenizer) for split in ("train", "eval")}
    reports = []
    task_module = importlib.import_module(f"trainables.{task}")
    task_module.train(trial, data, source, lambda metrics, checkpoint: reports.append(metrics), time.time())
    if rank == 0:
        Path(out).write_text(json.dumps(reports))
    dist.destroy_process_group()


# Steps of each run: 20 for SFT (the target), fewer for DPO (two forwards a step).
STEPS = {"sft": 20, "dpo": 6}


def reports(tmp_path, task: str, **overrides) -> list[dict]:
    """The report of every step of a 2-worker run of `task` (same seed every run)."""
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    mp.spawn(_train_in_two_processes, args=(task, overrides, str(out), 29500 + os.getpid() % 400), nprocs=2)
    return json.loads(out.read_text())


def losses(tmp_path, **overrides) -> list[float]:
    """The train loss of each of 20 steps of a 2-worker SFT run."""
    return [report["train_loss"] for report in reports(tmp_path, "sft", **overrides)]


def test_zero2_and_fsdp_losses_match_ddp_and_checkpointing_changes_none(tmp_path):
    ddp = losses(tmp_path)
    assert len(ddp) == 20 and ddp[-1] < ddp[0]
    runs = {
        "zero2": losses(tmp_path, **{"resources.strategy": "deepspeed"}),
        "ddp+checkpointing": losses(tmp_path, **{"training.gradient_checkpointing": True}),
        "zero2+checkpointing": losses(
            tmp_path, **{"resources.strategy": "deepspeed", "training.gradient_checkpointing": True}
        ),
        "fsdp": losses(tmp_path, **{"resources.strategy": "fsdp"}),
    }
    for name, run in runs.items():
        assert max(abs(a - b) for a, b in zip(run, ddp, strict=True)) < 1e-3, (name, run, ddp)


DPO_METRICS = ("train_loss", "eval_loss", "eval_rewards_chosen", "eval_rewards_rejected", "eval_rewards_accuracy")


def test_dpo_under_zero2_zero3_and_fsdp_matches_ddp(tmp_path):
    """DPO's reference is the policy with its adapters disabled: under ZeRO-3 and FSDP that
    forward gathers the sharded base weights like the policy's own."""
    ddp = reports(tmp_path, "dpo")
    assert len(ddp) == STEPS["dpo"] and ddp[-1]["eval_loss"] < ddp[0]["eval_loss"], ddp
    for strategy, stage in (("deepspeed", 2), ("deepspeed", 3), ("fsdp", 2)):
        run = reports(tmp_path, "dpo", **{"resources.strategy": strategy, "resources.deepspeed": {"zero_stage": stage}})
        for name in DPO_METRICS:
            ours, theirs = [r[name] for r in run], [r[name] for r in ddp]
            assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3, (strategy, stage, name, ours, theirs)


def test_calibration_steps_deepspeed_and_fsdp_in_this_process():
    """`sweep start` calibrates in its own process, which no launcher made part of a
    process group; DeepSpeed's engine and FSDP step only inside one (a group of one here)."""
    from sweeper.plan.calibrate import calibrate
    from sweeper.plan.inputs import prepare_inputs
    from sweeper.spec.load import validate_spec
    from trainables.models import BUILTIN_TINY_MODEL, DEFAULT_CACHE_ROOT, resolve_model_source

    source = resolve_model_source(BUILTIN_TINY_MODEL)
    for resources in ({"strategy": "deepspeed", "deepspeed": {"zero_stage": 3}}, {"strategy": "fsdp"}):
        search = {"num_trials": 2, "parameters": {"lora.r": {"distribution": "categorical", "values": [4, 8]}}}
        spec = validate_spec(small_sweep("c", resources={"workers_per_trial": 2, **resources}, search=search), base_dir=REPO)
        data = prepare_inputs(spec, DEFAULT_CACHE_ROOT).data
        calibration = calibrate(spec, data, source, on_cluster=False)
        assert calibration.first.step_seconds > 0 and calibration.costliest.step_seconds > 0, resources
        assert "one worker of 2" in calibration.first.source
