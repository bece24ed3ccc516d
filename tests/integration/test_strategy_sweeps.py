"""One-trial sweeps through `sweep start` under each real-size strategy on CPUs (DeepSpeed
ZeRO-2 and ZeRO-3 with 2 workers per trial, FSDP with 2 workers, QLoRA nf4 with gradient
checkpointing; DPO under ZeRO-3): each trains, checkpoints, and goes on from its
checkpoint after losing a process mid-trial: a training process killed with -9 (a Train
worker, or a one-worker trial's own process; Tune retries the trial from its checkpoint,
search.max_failures 1, in the same driver), or, for
DPO under ZeRO-3, the driver killed with -9 and `sweep resume`. (One trial: a second one,
started fresh, showed nothing of the strategy's checkpoint that the first does not;
starting the rest of a resumed sweep is test_resilience's. A worker's loss instead of
the driver's for four of the five: the same checkpoint, read back by the same
`ray.train.get_checkpoint()` -> strategy restore path, without a second driver's 20-25 s.)"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import small_dpo_sweep, small_sweep, wait_for, write_yaml
from tests.integration.conftest import run_cli, start_driver, sweep_runs

pytestmark = pytest.mark.integration

# A trial of the tiny model steps in about 0.1 s here: 90 steps after the first checkpoint
# leave several seconds to kill the driver mid-trial, on a busy machine more.
TRAINING = {"max_steps": 120, "eval_every": 30}
EVALUATIONS = [30, 60, 90, 120]
ZERO3 = {"resources": {"workers_per_trial": 2, "strategy": "deepspeed", "deepspeed": {"zero_stage": 3}}}
# (task's sweep, sections over it, what its checkpoint holds besides the adapter to go on
# from, what is killed mid-trial)
CASES = {
    "zero2": (small_sweep, {"resources": {"workers_per_trial": 2, "strategy": "deepspeed", "deepspeed": {"zero_stage": 2}}}, "deepspeed", "worker"),
    "zero3": (small_sweep, ZERO3, "deepspeed", "worker"),
    "fsdp": (small_sweep, {"resources": {"workers_per_trial": 2, "strategy": "fsdp"}}, "training_state.pt", "worker"),
    "qlora": (small_sweep, {"model": {"quantization": "nf4"}, "training": {**TRAINING, "gradient_checkpointing": True}}, "training_state.pt", "worker"),
    "dpo-zero3": (small_dpo_sweep, ZERO3, "deepspeed", "driver"),
}


def training_processes(driver) -> list[psutil.Process]:
    """The processes that train, in the driver's own local cluster (Ray titles them): the
    Train workers of a several-worker trial (its own process, Tune's function trainable,
    only waits on them), or the trial's own process where one worker trains in it."""
    titled: dict[str, list[psutil.Process]] = {"RayTrainWorker": [], "ImplicitFunc": []}
    for process in psutil.Process(driver.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            title = " ".join(process.cmdline())
            for name, found in titled.items():
                if name in title:
                    found.append(process)
    return titled["RayTrainWorker"] or titled["ImplicitFunc"]


def eval_losses(client: MlflowClient, run_id: str) -> list[tuple[int, float]]:
    """(step, eval loss) of every evaluation MLflow recorded for a trial, in order."""
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, "eval_loss"), key=lambda m: (m.timestamp, m.step))]


# The quick tier's story is a ZeRO-3 trial's driver killed (DeepSpeed's sharded checkpoint,
# DPO's reference model) and an FSDP trial's worker killed (the state Tune's retry reads
# back); ZeRO-2, ZeRO-3 with a worker killed, and QLoRA run in the full tier only.
STORY_CASES = {"dpo-zero3", "fsdp"}


@pytest.mark.timeout(600)  # a hang fails the test instead of blocking CI
@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.story] if case in STORY_CASES else [])
                                  for case in CASES])
def test_a_sweep_trains_checkpoints_and_goes_on_from_its_checkpoint_after_a_kill_9(tmp_path, case):
    name = f"strategy-{case}"
    sweep, strategy_sections, resume_state, killed = CASES[case]
    sections = {
        "search": {"num_trials": 1, "seed": 7, "max_failures": 1,
                   "parameters": {"training.learning_rate": {"distribution": "log_uniform", "low": 3e-3, "high": 1e-2}}},
        "training": TRAINING,
        "early_stopping": {"scheduler": "none"},
        **strategy_sections,
    }
    path = write_yaml(tmp_path / f"{name}.yaml", sweep(name, **sections))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)

    def checkpointed_running_trial():
        if driver.poll() is not None:
            raise AssertionError(f"sweep start ended (exit {driver.returncode}) before a checkpoint:\n{driver.stdout.read()}")
        try:
            _, children = sweep_runs(uri, name)
        except Exception:  # the store is being created
            return None
        running = [c for c in children if c.data.tags.get("sweeper.state") == "running" and "eval_loss" in c.data.metrics]
        return running[0] if running else None

    # 1. kill -9 a training process, or the driver, once a trial has reported (and checkpointed) mid-way.
    driver = start_driver("start", str(path), cwd=tmp_path)
    try:
        interrupted = wait_for(checkpointed_running_trial, 300, "a trial's first checkpoint", every=0.5)
        steps_before_kill = [step for step, _ in eval_losses(client, interrupted.info.run_id)]
        if killed == "worker":
            workers = training_processes(driver)
            assert workers, "no training process under the driver"
            workers[0].kill()
            output, _ = driver.communicate(timeout=420)
            assert driver.returncode == 0, output
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=60)
    interrupted_id = interrupted.data.tags["sweeper.trial_id"]
    assert steps_before_kill and max(steps_before_kill) < TRAINING["max_steps"], steps_before_kill

    # 2. For the driver's loss: resume to the end.
    if killed == "driver":
        result = run_cli("resume", name, cwd=tmp_path, timeout=420)
        assert result.returncode == 0, result.stdout + result.stderr
    (parent,), children = sweep_runs(uri, name)
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_total"] == 1
    assert [c.data.tags["sweeper.state"] for c in children] == ["completed"], [c.data.tags for c in children]
    for child in children:
        history = eval_losses(client, child.info.run_id)
        steps = [step for step, _ in history]
        # Each evaluation at most once, up to the last step: the killed trial went on from
        # its checkpoint instead of training its first steps again. (A report the killed
        # driver never logged stays missing: its trial resumes after that checkpoint.)
        assert len(steps) >= 2 and set(steps) <= set(EVALUATIONS), (child.data.tags["sweeper.trial_id"], history)
        assert steps == sorted(set(steps)) and steps[-1] == TRAINING["max_steps"], history
        assert history[-1][1] < history[0][1], history  # it learned (SFT's or DPO's eval loss)
        checkpoint = Path(child.data.tags["sweeper.checkpoint_path"])
        assert (checkpoint / "adapter_model.safetensors").is_file(), sorted(p.name for p in checkpoint.iterdir())
        assert (checkpoint / resume_state).exists(), sorted(p.name for p in checkpoint.iterdir())
    assert [c.data.tags["sweeper.trial_id"] for c in children] == [interrupted_id]
    if killed == "worker":  # retried once by Tune, after its first evaluation
        restarts = client.get_metric_history(interrupted.info.run_id, "restarts")
        assert {p.value for p in restarts} == {1.0} and min(p.step for p in restarts) > steps_before_kill[0], restarts
