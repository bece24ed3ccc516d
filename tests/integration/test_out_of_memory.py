"""Out of memory, handled, through a real sweep (the `oom` chaos fault on CPU): the trial
whose micro-batch runs out goes on at half and says so on its run and in the summary; the
one at micro-batch 1 fails with its memory and forecast in the reason."""

import re

import pytest

from tests.conftest import small_sweep, write_yaml
from tests.integration.conftest import run_cli, sweep_runs

pytestmark = pytest.mark.integration


def test_a_trial_out_of_memory_goes_on_at_half_the_micro_batch_and_one_at_1_fails(tmp_path):
    raw = small_sweep(
        "oom",
        training={"max_steps": 4, "eval_every": 2, "gradient_accumulation_steps": 2},
        search={"method": "grid", "num_trials": 2, "max_failures": 0,
                "parameters": {"training.per_device_batch_size": {"distribution": "categorical", "values": [4, 1]}}},
        chaos={"fault": "oom", "at_step": 2},
        early_stopping={"scheduler": "none"},
    )
    result = run_cli("start", str(write_yaml(tmp_path / "oom.yaml", raw)), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 completed, 0 pruned, 1 failed" in result.stdout, result.stdout
    (parent,), children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "oom")
    by_size = {c.data.params["training.per_device_batch_size"]: c for c in children}

    went_on = by_size["4"]
    number = went_on.data.tags["sweeper.trial_number"]
    assert went_on.data.tags["sweeper.status"] == "completed"
    assert went_on.data.tags["sweeper.out_of_memory"] == "out of memory at micro-batch 4, went on at 2"
    assert went_on.data.metrics["out_of_memory_at_micro_batch"] == 4 and went_on.data.metrics["micro_batch"] == 2
    assert went_on.data.metrics["steps_trained"] == 4
    assert f"trial {number}: out of memory at micro-batch 4, went on at 2" in result.stdout, result.stdout

    failed = by_size["1"]
    assert failed.info.status == "FAILED"
    assert re.fullmatch(
        r"failed: TrialOutOfMemory: out of memory at micro-batch 1 \(step 2\), which cannot be halved: "
        r"peak resident \d+(\.\d)? [MG]iB \(CPU\); forecast \d+ MiB at micro-batch 1",
        failed.data.tags["sweeper.status"],
    ), failed.data.tags["sweeper.status"]
    assert "out_of_memory_at_micro_batch" not in failed.data.metrics
