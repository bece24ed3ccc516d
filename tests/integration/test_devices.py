"""A trial asked to run without a GPU sees none, on a node whose processes see one: the
one-worker trial's loop, run in Tune's trial process through the sweep's own trial
function on a local cluster as the sweep starts it, finds CUDA_VISIBLE_DEVICES empty
although the node has it set."""

import pytest

pytestmark = pytest.mark.integration


def devices_loop(config: dict) -> None:
    import os

    import torch

    config["session"].report({
        "step": 1,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        "cuda_available": torch.cuda.is_available(),
    }, None)


def test_a_cpu_trial_on_a_node_with_a_visible_gpu_sees_none(tmp_path, monkeypatch):
    import ray
    from ray import tune

    from sweeper.cluster._connect import LOCAL_CLUSTER, start_ray
    from sweeper.run._trial import run_trial, trial_resources
    from sweeper.spec._load import validate_spec
    from tests.conftest import small_sweep

    # Every process of the cluster (raylet, workers) inherits it, as on a GPU node.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = validate_spec(small_sweep("devices", output_dir=str(tmp_path / "sweeps")), tmp_path)
    assert not spec.resources.use_gpu
    try:
        start_ray(LOCAL_CLUSTER)
        trainable = tune.with_parameters(
            run_trial, trial_config=spec.trial_config(), data={}, cache_root=str(tmp_path),
            trials_dir=str(tmp_path / "trials"), worker_start_timeout_s=60.0, train_loop=devices_loop,
        )
        results = tune.Tuner(
            tune.with_resources(trainable, trial_resources(spec.resources)),
            tune_config=tune.TuneConfig(num_samples=1),
            run_config=tune.RunConfig(name="devices", storage_path=str(tmp_path / "tune"), verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    assert not results.errors, results.errors
    metrics = results[0].metrics
    assert metrics["cuda_visible_devices"] == ""
    assert metrics["cuda_available"] is False
