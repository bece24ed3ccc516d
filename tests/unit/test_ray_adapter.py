"""The parts of sweeper/cluster/ray_adapter.py that can be checked without a Ray cluster:
Tune's trial numbers, running averages, where `ray start` records its head, and that no
private module of Ray is imported by sweeper. tests/integration/test_ray_adapter.py checks
the rest against a real cluster."""

import os
import subprocess
import sys

import pytest

from sweeper.cluster import ray_adapter


def test_no_private_module_of_ray_is_imported_anywhere_in_the_project():
    """Trials, the driver and the tests run on Ray's public API: what the adapter keeps are
    attributes and constants, never an import of Ray's private modules."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    private = re.compile(r"ray\.(_private|train\._internal|train\.v2\._internal)")
    found = [f"{path.relative_to(root)}:{number}"
             for folder in ("sweeper", "trainables", "tests", "benchmarks")
             for path in sorted((root / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert found == []


def test_importing_the_adapter_loads_neither_ray_nor_torch():
    code = "import sys, sweeper.cluster.ray_adapter; print(sorted({'ray', 'torch', 'mlflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]"


def test_the_address_file_is_where_ray_start_records_its_head(tmp_path, monkeypatch):
    """`--address auto` probes the head named in this file; Ray keeps it in its temp folder
    (RAY_TMPDIR moves that folder), under the name `ray start` writes."""
    from sweeper.cluster.ray_adapter import ray_address_file

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert ray_address_file() == tmp_path / "ray" / "ray_current_cluster"


def _trials_of(generator, tmp_path) -> list:
    from ray.tune.experiment import Experiment

    def trainable(config):
        pass

    generator.add_configurations([Experiment("numbered", trainable, num_samples=3, storage_path=str(tmp_path))])
    trials = []
    while (trial := generator.next_trial()) is not None:
        trials.append(trial)
    return trials


@pytest.mark.parametrize("searched", [True, False])
def test_tune_trial_number_counts_the_trials_from_1_with_and_without_a_searcher(searched, tmp_path):
    """Tune's own generators: its search generator (a searched sweep) and its basic
    variant generator (nothing searched) number their experiment tags differently."""
    from ray.tune.search import BasicVariantGenerator, SearchGenerator, Searcher

    class OneConfig(Searcher):
        def suggest(self, trial_id):
            return {"training.learning_rate": 3e-4}

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass

    generator = SearchGenerator(OneConfig()) if searched else BasicVariantGenerator()
    assert [ray_adapter.tune_trial_number(t) for t in _trials_of(generator, tmp_path)] == [1, 2, 3]


def test_an_ended_trials_running_averages_are_forgotten_and_its_figures_kept(tmp_path):
    """Tune keeps deques of recent values per reported number (what forget_running_averages
    drops); the figures derived from them stay, and the trial's checkpoint JSON shrinks."""
    from ray.tune.search import BasicVariantGenerator

    trial = _trials_of(BasicVariantGenerator(), tmp_path)[0]
    for step in (1, 2, 3):
        trial.update_last_result({"eval_loss": 1.0 / step, "train_loss": 2.0 / step, "training_iteration": step})
    assert len(trial.run_metadata.metric_n_steps["eval_loss"]["10"]) == 3
    figures = {metric: dict(values) for metric, values in trial.metric_analysis.items()}
    checkpointed = trial.get_json_state()[1]

    ray_adapter.forget_running_averages(trial)

    assert trial.run_metadata.metric_n_steps == {}
    assert trial.metric_analysis == figures and figures["eval_loss"]["last-5-avg"] == pytest.approx(11 / 18)
    assert len(trial.get_json_state()[1]) < len(checkpointed)
