"""Warm starts (search.warm_start): an earlier sweep's study, written by the real searcher
(driven by hand, no Ray), seeds a new sweep's study through Optuna's add_trials and
enqueue_trial; read back with optuna.load_study."""

import os
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.search._study import REPEAT_ATTR, WARM_START_ATTR, study_url
from sweeper.search._warm_start import read_warm_start
from sweeper.errors import UserError
from sweeper.search._searcher import make_searcher
from sweeper.spec._load import spec_to_yaml, validate_spec
from tests.conftest import small_sweep, write_yaml

EARLIER_SPACE = {
    "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2},
    "lora.r": {"distribution": "categorical", "values": [4, 8]},
}


def spec_of(tmp_path, name, **search):
    raw = small_sweep(name, output_dir=str(tmp_path / "sweeps" / name))
    raw["search"] = {**raw["search"], **search}
    return validate_spec(raw, base_dir=tmp_path)


def run_earlier(tmp_path, results):
    """Sweep `earlier`: trials ask their config, then end as given: (final loss or None
    for pruned at step 10)."""
    spec = spec_of(tmp_path, "earlier", parameters=EARLIER_SPACE, num_trials=len(results))
    search = make_searcher(spec, spec.sweep_dir)
    configs = {}
    for index, loss in enumerate(results):
        trial_id = f"e{index}"
        configs[trial_id] = search.suggest(trial_id)
        if loss is None:
            search.on_trial_complete(trial_id, {"step": 10, "eval_loss": 3.0})
        else:
            search.on_trial_result(trial_id, {"step": 10, "eval_loss": loss + 1})
            search.on_trial_complete(trial_id, {"step": 30, "eval_loss": loss})
    return configs


def test_finished_trials_seed_the_study_and_the_best_run_first(tmp_path):
    configs = run_earlier(tmp_path, [2.0, 1.2, None, 1.5])
    spec = spec_of(tmp_path, "later", parameters=EARLIER_SPACE, warm_start={"sweep": "earlier", "top_k": 2})
    search = make_searcher(spec, spec.sweep_dir, read_warm_start(spec))
    first, second, third = (search.suggest(trial_id) for trial_id in ("l0", "l1", "l2"))
    assert (first, second) == (configs["e1"], configs["e3"])  # best first
    assert third not in configs.values()
    study = optuna.load_study(study_name="later", storage=study_url(spec.sweep_dir))
    added = [t for t in study.trials if t.state.is_finished()]
    assert sorted(t.state for t in added) == sorted([TrialState.COMPLETE] * 3 + [TrialState.PRUNED])
    pruned = next(t for t in added if t.state == TrialState.PRUNED)
    assert pruned.intermediate_values == {10: 3.0}
    # The searcher tells the driver where each trial's config came from, and so does the
    # study once it is reopened (`sweep resume`).
    for marked in (search, make_searcher(spec, spec.sweep_dir)):
        assert marked.marks("l0")[WARM_START_ATTR] == "earlier/e1"
        assert WARM_START_ATTR not in marked.marks("l2")


def test_parameters_outside_the_new_space_are_left_out_with_a_note(tmp_path):
    run_earlier(tmp_path, [2.0, 1.2])
    narrow = {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-5, "high": 1.1e-4}}
    spec = spec_of(tmp_path, "later", parameters=narrow, warm_start=[{"sweep": "earlier"}])
    seed = read_warm_start(spec)
    assert seed.notes == [
        "search.warm_start.0: lora.r of sweep 'earlier' is not searched here; left out",
        "search.warm_start.0: 2 of 2 values of training.learning_rate in sweep 'earlier' lie outside this "
        "search's range [1e-05, 0.00011]; left out of those trials",
    ]
    assert all(t.params == {} for t in seed.trials) and seed.first_configs == []


def test_a_missing_earlier_sweep_is_a_keyed_error(tmp_path):
    spec = spec_of(tmp_path, "later", parameters=EARLIER_SPACE, warm_start={"sweep": "nowhere"})
    with pytest.raises(UserError, match=r"^search\.warm_start\.0\.sweep: no earlier sweep 'nowhere'"):
        read_warm_start(spec)


def test_validate_names_a_missing_earlier_sweep(tmp_path):
    raw = small_sweep("later", output_dir=str(tmp_path / "sweeps" / "later"))
    raw["search"]["warm_start"] = {"sweep": "nowhere", "top_k": 2}
    result = subprocess.run(
        [sys.executable, "-m", "sweeper.cli", "validate", str(write_yaml(tmp_path / "later.yaml", raw))],
        cwd=tmp_path, env=os.environ, capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: search.warm_start.0.sweep: no earlier sweep 'nowhere'")


def write_earlier_yaml(tmp_path, **training):
    """The sweep.yaml `sweep start` leaves in the earlier sweep's folder."""
    raw = small_sweep("earlier", output_dir=str(tmp_path / "sweeps" / "earlier"))
    raw["search"] = {**raw["search"], "parameters": EARLIER_SPACE}
    raw["training"] = {**raw.get("training", {}), **training}
    spec = validate_spec(raw, base_dir=tmp_path)
    (spec.sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec))


def test_a_first_config_that_trains_the_earlier_run_again_is_a_repeat(tmp_path):
    """Same space, same fixed config: the enqueued best config repeats its earlier run,
    and the searcher says which Tune trial got it (ASHA lets it go on unranked)."""
    configs = run_earlier(tmp_path, [2.0, 1.2])
    write_earlier_yaml(tmp_path)
    spec = spec_of(tmp_path, "later", parameters=EARLIER_SPACE, warm_start={"sweep": "earlier", "top_k": 2})
    seed = read_warm_start(spec)
    assert seed.repeats == {"earlier/e1", "earlier/e0"}
    search = make_searcher(spec, spec.sweep_dir, seed)
    assert search.suggest("l0") == configs["e1"] and search.suggest("l1") == configs["e0"]
    search.suggest("l2")  # sampled
    restored = make_searcher(spec, spec.sweep_dir)  # from the study, as after a restore
    for marked in (search, restored):
        assert {t for t in ("l0", "l1", "l2") if marked.marks(t).get(REPEAT_ATTR)} == {"l0", "l1"}
        assert {"l0", "l1"} <= marked.unranked


def test_a_first_config_is_no_repeat_when_the_run_would_differ(tmp_path):
    run_earlier(tmp_path, [2.0, 1.2])
    write_earlier_yaml(tmp_path, max_steps=60)  # the earlier run trained longer
    spec = spec_of(tmp_path, "later", parameters=EARLIER_SPACE, warm_start={"sweep": "earlier", "top_k": 1})
    assert read_warm_start(spec).first_configs and read_warm_start(spec).repeats == set()
    write_earlier_yaml(tmp_path)
    wider = {**EARLIER_SPACE, "training.warmup_ratio": {"distribution": "uniform", "low": 0.0, "high": 0.1}}
    spec = spec_of(tmp_path, "wider", parameters=wider, warm_start={"sweep": "earlier", "top_k": 1})
    assert read_warm_start(spec).repeats == set()  # warmup_ratio would be sampled anew
