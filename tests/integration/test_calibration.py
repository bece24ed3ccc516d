"""Calibration runs where the sweep's trials run: in a Ray task holding one worker's
resources (a GPU for a GPU sweep), never in the driver, which never initialises CUDA.
On this CPU machine the GPU is a logical resource of the local cluster (`num_gpus=1`)."""

import os

import pytest

from tests.conftest import REPO, small_sweep

pytestmark = pytest.mark.integration


def test_a_gpu_sweeps_calibration_runs_in_ray_workers_with_a_gpu_each_and_the_driver_never_touches_cuda():
    import ray
    import torch

    from sweeper.plan._calibrate import calibrate
    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import validate_spec
    from trainables.models import DEFAULT_CACHE_ROOT

    search = {"num_trials": 2, "parameters": {"lora.r": {"distribution": "categorical", "values": [4, 8]}}}
    raw = small_sweep("gpu-calibration", resources={"use_gpu": True, "gpus_per_worker": 1}, search=search)
    spec = validate_spec(raw, base_dir=REPO)
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    assert not ray.is_initialized()
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        calibration = calibrate(spec, inputs.data, inputs.model_source)
    finally:
        ray.shutdown()
    # The costliest configuration measured in a Ray worker process, not in this one.
    assert calibration.worker_pid != os.getpid()
    assert calibration.timing.step_seconds > 0 and calibration.timing.eval_seconds > 0
    assert "lora.r=8" in calibration.timing.source
    assert "in a Ray task with one worker's resources" in calibration.timing.source
    assert not torch.cuda.is_initialized()
