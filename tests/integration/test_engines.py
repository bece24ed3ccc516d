"""The trial engines on a real local Ray cluster, real MLflow and the tiny model: trl's
SFTTrainer with ASHA by promotion (a paused trial goes on from the trainer's own
checkpoint and reports each step once, as an uninterrupted run would), a sweep over the
preference methods (DPO, SimPO and ORPO, each with its own conditional parameters), a trl sweep whose
driver is killed with -9 and resumed, and the user's own function (the plain-PyTorch
example; a function that never reports fails its trial and the sweep goes on). In one
process without Ray: every trl method reports at the sweep's steps with the trainer's
checkpoint, a trial continued from one equals one trained straight through, and the
calibration times a trl trial also where its trainer counts no tokens."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import textwrap

import polars as pl
import pytest
import yaml

from sweeper.track._store import SweepStore
from tests.conftest import REPO, small_dpo_sweep, small_sweep, write_yaml
from tests.integration.conftest import run_cli as sweep
from tests.integration.test_sweep import trained_in_this_process

pytestmark = pytest.mark.integration


def trl_preference_sweep(name: str, tmp_path, trl: dict, parameters: dict, num_trials: int) -> dict:
    raw = small_dpo_sweep(
        name, trainer="trl", trl=trl, output_dir=str(tmp_path / "sweeps" / name),
        training={"max_steps": 10, "eval_every": 5, "per_device_batch_size": 8},
        early_stopping={"scheduler": "none"},
    )
    raw["dpo"] = {"max_prompt_length": 64}
    raw["search"] = {"num_trials": num_trials, "metric": "eval_rewards_accuracy", "goal": "maximize", "seed": 0,
                     "parameters": {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-3, "high": 1e-2},
                                    **parameters}}
    return raw


def child_runs(tmp_path, name: str):
    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return store, store.trials(name)


def test_a_paused_trl_trial_continues_from_the_trainers_checkpoint(tmp_path):
    """ASHA by promotion on 1 slot, as for the built-in loop (tests/integration/test_sweep.py):
    trial 1 (lr 1e-2) reaches the rung alone and is paused; trial 2 (lr 1e-5) arrives and
    stops there; trial 1 goes on from the SFTTrainer's step-10 checkpoint in a new Train
    run. It reports steps 10, 20, 30 once each, with the losses of the same trial trained
    straight through in this process."""
    common = dict(
        trainer="trl", trl={"method": "sft"}, lora={"dropout": 0.0},
        training={"max_steps": 30, "eval_every": 10, "per_device_batch_size": 8},
    )
    raw = small_sweep(
        "trl-promoted", output_dir=str(tmp_path / "sweeps" / "trl-promoted"),
        search={"method": "grid", "num_trials": 2, "max_concurrent_trials": 1,
                "parameters": {"training.learning_rate": {"distribution": "categorical", "values": [1e-5, 1e-2]}}},
        **common,
    )
    result = sweep("start", str(write_yaml(tmp_path / "promoted.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])

    store, trials = child_runs(tmp_path, "trl-promoted")
    by_lr = {float(json.loads(row["params"])["training.learning_rate"]): row for row in trials.to_dicts()}
    winner, loser = by_lr[1e-2], by_lr[1e-5]
    assert (winner["state"], winner["steps"], winner["pauses"]) == ("completed", 30, 1)
    assert (loser["state"], loser["status"]) == ("pruned", "pruned at step 10")
    history = store.history(trials=trials.filter(pl.col("run_id") == winner["run_id"])).sort("step")
    resumed = list(zip(history["step"], history["value"]))

    straight_raw = small_sweep(
        "trl-straight", output_dir=str(tmp_path / "sweeps" / "trl-straight"), search={"num_trials": 1, "parameters": {}},
        early_stopping={"scheduler": "none"}, **{**common, "training": {**common["training"], "learning_rate": 1e-2}},
    )
    reports, _ = trained_in_this_process(write_yaml(tmp_path / "straight.yaml", straight_raw))
    straight = [(report["step"], report["eval_loss"]) for report in reports]
    assert [step for step, _ in resumed] == [step for step, _ in straight] == [10, 20, 30]
    assert [loss for _, loss in resumed] == pytest.approx([loss for _, loss in straight], rel=1e-3)
    # The checkpoint the trial ended with is the trainer's own.
    checkpoint = winner["checkpoint_path"]
    assert checkpoint and all((tmp_path / checkpoint).joinpath(f).exists() or
                              __import__("pathlib").Path(checkpoint, f).exists()
                              for f in ("trainer_state.json", "optimizer.pt", "adapter_model.safetensors"))


def test_a_sweep_over_preference_methods_gives_each_trial_its_methods_parameters_and_metrics(tmp_path):
    """trl.method searched over DPO, SimPO (CPOTrainer, loss_type simpo) and ORPO
    (trl.experimental's ORPOTrainer), each with its own conditional parameters (DPO: beta
    and its loss type; SimPO: beta on its own scale and gamma; ORPO: its odds-ratio
    weight): each trial's MLflow params hold its method's and no other's, every trial
    completes, and every evaluation reports the preference metrics."""
    raw = trl_preference_sweep("trl-methods", tmp_path, {"method": "dpo"}, {
        "trl.method": {"distribution": "categorical", "values": ["dpo", "simpo", "orpo"], "conditional": {
            "dpo": {"trl.beta": {"distribution": "log_uniform", "low": 0.05, "high": 0.5},
                    "trl.loss_type": {"distribution": "categorical", "values": ["sigmoid", "ipo", "hinge"]}},
            "simpo": {"trl.beta": {"distribution": "uniform", "low": 1.0, "high": 2.5},
                      "trl.simpo_gamma": {"distribution": "uniform", "low": 0.3, "high": 1.5}},
            "orpo": {"trl.beta": {"distribution": "log_uniform", "low": 0.05, "high": 0.5}},
        }},
    }, num_trials=3)
    raw["search"].update(method="random", seed=0)  # seed 0 draws dpo, simpo, then orpo
    result = sweep("start", str(write_yaml(tmp_path / "methods.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])
    assert "3 completed" in result.stdout and "trl.simpo_gamma=" in result.stdout
    store, trials = child_runs(tmp_path, "trl-methods")
    assert trials["state"].to_list() == ["completed"] * 3
    params = {json.loads(p)["trl.method"]: json.loads(p) for p in trials["params"]}
    assert set(params) == {"dpo", "simpo", "orpo"}
    common = {"training.learning_rate", "trl.method", "trl.beta"}
    assert set(params["dpo"]) == common | {"trl.loss_type"} and params["dpo"]["trl.loss_type"] in ("sigmoid", "ipo", "hinge")
    assert set(params["simpo"]) == common | {"trl.simpo_gamma"} and set(params["orpo"]) == common
    assert 0.05 <= float(params["dpo"]["trl.beta"]) <= 0.5 and 1.0 <= float(params["simpo"]["trl.beta"]) <= 2.5
    assert 0.05 <= float(params["orpo"]["trl.beta"]) <= 0.5
    for key in ("eval_loss", "eval_rewards_accuracy", "eval_rewards_margin"):
        assert sorted(store.history(keys=(key,), trials=trials)["step"].to_list()) == [5, 5, 5, 10, 10, 10], key
    orpo = trials.filter(pl.col("params").str.contains('"orpo"'))
    assert sorted(store.history(keys=("train_loss",), trials=orpo)["step"].to_list()) == [5, 10]


def test_a_function_sweep_runs_the_plain_pytorch_example(tmp_path):
    """examples/engines/function-torch.yaml, 3 trials: the example's own knob
    (function.hidden) is searched beside the learning rate, ASHA ranks by its eval_loss,
    and the trials' curves reach MLflow."""
    raw = yaml.safe_load((REPO / "examples" / "engines" / "function-torch.yaml").read_text())
    shutil.copy(REPO / "examples" / "engines" / "plain_torch.py", tmp_path / "plain_torch.py")
    raw["data"] = {"train": str(REPO / "data" / "sft" / "train.jsonl"), "eval": str(REPO / "data" / "sft" / "eval.jsonl")}
    raw["search"]["num_trials"] = 3
    raw["output_dir"] = str(tmp_path / "sweeps" / "function-torch")
    result = sweep("start", str(write_yaml(tmp_path / "function.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])
    assert "function.hidden=" in result.stdout
    store, trials = child_runs(tmp_path, "function-torch")
    assert len(trials) == 3 and set(trials["state"]) <= {"completed", "pruned"}
    assert "completed" in trials["state"].to_list()
    history = store.history(keys=("eval_loss",), trials=trials)
    for number, steps in history.group_by("trial_number").agg(pl.col("step").sort()).iter_rows():
        assert steps == list(range(20, steps[-1] + 1, 20)), (number, steps)


def test_a_function_that_never_reports_fails_its_trial_and_the_sweep_goes_on(tmp_path):
    (tmp_path / "quiet.py").write_text(textwrap.dedent("""
        def train(config, reporter):
            if config["function"]["quiet"]:
                return
            reporter.report({"eval_loss": 1.0 / config["training"]["max_steps"]}, config["training"]["max_steps"])
    """))
    raw = small_sweep(
        "quiet", trainer="function", function={"entry_point": "quiet.py:train", "quiet": False},
        output_dir=str(tmp_path / "sweeps" / "quiet"), early_stopping={"scheduler": "none"},
        search={"method": "grid", "num_trials": 2, "max_failures": 0,
                "parameters": {"function.quiet": {"distribution": "categorical", "values": [True, False]}}},
    )
    result = sweep("start", str(write_yaml(tmp_path / "quiet.yaml", raw)), cwd=tmp_path, timeout=600)
    print(result.stdout[-3000:])
    store, trials = child_runs(tmp_path, "quiet")
    states = {json.loads(row["params"])["function.quiet"]: row for row in trials.to_dicts()}
    assert states["False"]["state"] == "completed", states
    assert states["True"]["state"] == "failed", states
    assert "returned without calling reporter.report" in states["True"]["status"], states["True"]["status"]


def trl_trial(tmp_path, method: str, **sections):
    """A one-trial trl sweep's spec and its prepared inputs (eval cut to 16 rows)."""
    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import validate_spec
    from trainables.models import DEFAULT_CACHE_ROOT

    if method == "sft":
        raw = small_sweep("one", trainer="trl", trl={"method": method}, **sections)
    else:
        raw = small_dpo_sweep("one", trainer="trl", trl={"method": method}, **sections)
        raw["dpo"] = {"max_prompt_length": 64}
    raw["search"] = {"num_trials": 1, "metric": "eval_loss", "goal": "minimize"}
    raw["early_stopping"] = {"scheduler": "none"}
    spec = validate_spec(raw, base_dir=tmp_path)
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    for key in ("eval", "eval_rows"):
        if key in inputs.data:
            value = inputs.data[key]
            inputs.data[key] = value[:16] if isinstance(value, list) else value.rows(list(range(16)))
    return spec, inputs


@pytest.mark.parametrize("method, metrics", [
    ("sft", {"eval_loss", "eval_perplexity", "train_loss", "tokens_per_second"}),
    ("dpo", {"eval_loss", "eval_rewards_accuracy", "eval_rewards_margin", "tokens_per_second"}),
    ("kto", {"eval_loss", "eval_rewards_chosen", "eval_rewards_rejected", "tokens_per_second"}),
    ("orpo", {"eval_loss", "eval_rewards_accuracy", "train_loss"}),
    ("simpo", {"eval_loss", "eval_rewards_accuracy", "eval_rewards_margin"}),
])
def test_every_trl_method_reports_at_the_sweeps_steps_with_the_trainers_checkpoint(tmp_path, method, metrics):
    """In one process, no Ray: each method's trainer evaluates at every training.eval_every
    and at the last step, and each report comes with the trainer's own checkpoint."""
    import os
    import time

    from trainables import trl_engine

    spec, inputs = trl_trial(tmp_path, method, training={"max_steps": 4, "eval_every": 3})
    reports = []
    trl_engine.train(spec.trial_config(), inputs.data, inputs.model_source,
                     lambda m, folder: reports.append((m, sorted(os.listdir(folder)))), time.time())
    assert [m["step"] for m, _ in reports] == [3, 4]
    for report, files in reports:
        assert metrics <= set(report), (method, sorted(report))
        assert {"trainer_state.json", "optimizer.pt", "adapter_model.safetensors", "report.json"} <= set(files)


def test_a_trl_trial_continued_from_its_checkpoint_equals_one_trained_straight(tmp_path):
    """LoRA dropout on: the trainer's checkpoint holds its random state and data position."""
    import shutil
    import time

    from trainables import trl_engine

    spec, inputs = trl_trial(tmp_path, "sft", lora={"dropout": 0.05},
                             training={"max_steps": 20, "eval_every": 10, "learning_rate": 1e-2})
    config = spec.trial_config()
    straight = []
    trl_engine.train(config, inputs.data, inputs.model_source, lambda m, _: straight.append(m), time.time())

    class Paused(Exception):
        pass

    kept = tmp_path / "kept"

    def pause(metrics, folder):
        shutil.copytree(folder, kept)
        raise Paused

    with pytest.raises(Paused):
        trl_engine.train(config, inputs.data, inputs.model_source, pause, time.time())
    resumed = []
    trl_engine.train(config, inputs.data, inputs.model_source, lambda m, _: resumed.append(m), time.time(),
                     resume_from=str(kept))
    assert [m["step"] for m in resumed] == [20]
    assert (resumed[0]["eval_loss"], resumed[0]["train_loss"]) == (straight[1]["eval_loss"], straight[1]["train_loss"])


def test_the_hf_trainer_example_reports_each_evaluation_through_the_reporters_callback(tmp_path):
    """examples/engines/hf_trainer.py through the function engine, in one process: the
    Trainer's evaluations reach the reporter at steps 10 and 20, each with its checkpoint."""
    import os
    import time

    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import load_spec
    from trainables import function_engine
    from trainables.models import DEFAULT_CACHE_ROOT

    spec = load_spec(REPO / "examples" / "engines" / "function-hf.yaml")
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT)
    inputs.data["eval"] = inputs.data["eval"].rows(list(range(16)))
    reports = []
    function_engine.train(spec.trial_config(), inputs.data, inputs.model_source,
                          lambda m, folder: reports.append((m, sorted(os.listdir(folder)))), time.time())
    assert [m["step"] for m, _ in reports] == [10, 20]
    assert all({"eval_loss", "train_loss"} <= set(m) and "trainer_state.json" in files for m, files in reports)


def test_every_dpo_loss_type_of_trl_trains(tmp_path):
    """Each of DPOConfig.loss_type's values (read from the dataclass, as the schema reads
    them) trains two steps through the engine and reports a finite eval loss."""
    import math
    import time

    from trainables import trl_engine
    from trainables.engines import field_choices, trl_config_fields

    losses = field_choices(trl_config_fields("dpo")["loss_type"])
    assert len(losses) == 15
    spec, inputs = trl_trial(tmp_path, "dpo", training={"max_steps": 2, "eval_every": 2})
    inputs.data["train_rows"] = inputs.data["train_rows"][:64]
    inputs.data["eval_rows"] = inputs.data["eval_rows"][:8]
    for loss in losses:
        values = {"trl.loss_type": loss}
        if loss in ("exo_pair", "robust"):  # trl asks these for label smoothing
            values["trl.label_smoothing"] = 0.1
        reports = []
        trl_engine.train(spec.trial_config().with_values(values), inputs.data, inputs.model_source,
                         lambda m, _: reports.append(m), time.time())
        assert [m["step"] for m in reports] == [2] and math.isfinite(reports[0]["eval_loss"]), loss


def test_a_trl_sweep_whose_driver_is_killed_is_resumed_without_retraining_a_finished_trial(tmp_path):
    """kill -9 of the driver and every process under it (its local Ray cluster) once the
    first of two trl SFT trials has finished, then `sweep resume` to the end: the finished
    trial keeps its end and its evaluations (each step once, in MLflow and the study); the
    other trial finishes."""
    import optuna

    from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url
    from tests.conftest import wait_for
    from tests.integration import cli_process
    from tests.integration.conftest import CLI_ENV, kill_driver_and_its_cluster, sweep_runs
    from tests.integration.test_resilience import eval_history

    raw = small_sweep(
        "trl-killed", trainer="trl", trl={"method": "sft"}, output_dir=str(tmp_path / "sweeps" / "trl-killed"),
        training={"max_steps": 10, "eval_every": 5, "per_device_batch_size": 8},
        search={"method": "random", "num_trials": 2, "max_concurrent_trials": 1, "seed": 3},
        early_stopping={"scheduler": "none"},
    )
    path = write_yaml(tmp_path / "killed.yaml", raw)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def finished():
        with contextlib.suppress(Exception):
            return [c for c in sweep_runs(uri, "trl-killed")[1]
                    if c.data.tags.get("sweeper.state") == "completed" and c.info.end_time is not None]
        return []

    driver = cli_process.start(["start", str(path)], cwd=tmp_path, env={**os.environ, **CLI_ENV},
                               quiet=True)
    try:
        wait_for(finished, 400, "a finished trial", every=0.5)
    finally:
        kill_driver_and_its_cluster(driver)
    before = {c.data.tags["sweeper.trial_id"]: (c.info.end_time, eval_history(uri, c.info.run_id)) for c in finished()}
    assert len(before) == 1, before
    [(done, (end_time, history))] = before.items()
    assert [step for step, _ in history] == [5, 10]

    result = sweep("resume", "trl-killed", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])
    (parent,), children = sweep_runs(uri, "trl-killed")
    assert parent.info.status == "FINISHED"
    by_id = {c.data.tags["sweeper.trial_id"]: c for c in children}
    assert len(by_id) == len(children) == 2 and {c.data.tags["sweeper.state"] for c in children} == {"completed"}
    # The finished trial was not trained again: the same end, each evaluation once, as before.
    assert by_id[done].info.end_time == end_time
    assert eval_history(uri, by_id[done].info.run_id) == history
    for child in children:
        assert [step for step, _ in eval_history(uri, child.info.run_id)] == [5, 10], child.data.tags
    study = optuna.load_study(study_name="trl-killed", storage=study_url(tmp_path / "sweeps" / "trl-killed"))
    told = {t.user_attrs[TUNE_TRIAL_ID_ATTR]: t for t in study.get_trials() if TUNE_TRIAL_ID_ATTR in t.user_attrs}
    assert sorted(told) == sorted(by_id) and sorted(told[done].intermediate_values.items()) == history
    assert {t.state.name for t in told.values()} == {"COMPLETE"}
    # A trial the killed driver had asked Optuna for but not yet started ends as FAIL.
    assert {t.state.name for t in study.get_trials() if TUNE_TRIAL_ID_ATTR not in t.user_attrs} <= {"FAIL"}


@pytest.mark.parametrize("method", ["orpo", "dpo"])
def test_the_calibration_times_a_trl_trial_also_where_its_trainer_counts_no_tokens(tmp_path, method):
    """sweeper.plan._calibrate.measure on trl's ORPOTrainer (no token count) and DPOTrainer,
    in one process: a step and an evaluation time from the train_seconds each report carries."""
    from sweeper.plan._calibrate import measure

    spec, inputs = trl_trial(tmp_path, method, training={"max_steps": 4, "eval_every": 2})
    timing = measure(spec, inputs.data, inputs.model_source, steps=2)
    assert timing.step_seconds > 0 and timing.eval_seconds > 0 and timing.setup_seconds > 0
