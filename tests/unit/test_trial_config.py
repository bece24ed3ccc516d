"""The trial contract: what a trial receives, and that trainables stands on its own."""

import ast

import pytest
import torch
from pydantic import ValidationError

from sweeper.errors import UserError
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables.common import make_optimizer
from trainables.config import TrialConfig
from trainables.errors import InputError


def test_no_trainables_module_imports_sweeper():
    importers = []
    for module in sorted((REPO / "trainables").glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "sweeper" or name.startswith("sweeper.") for name in names):
                importers.append(f"{module.name}:{node.lineno}")
    assert importers == []


def test_sampled_value_reaches_the_training_loop():
    spec = validate_spec(small_sweep("x"), base_dir=REPO)
    trial = spec.trial_config().with_values({"training.learning_rate": 0.0123, "lora.r": 4})
    assert trial.training.learning_rate == 0.0123 and trial.lora.r == 4
    assert trial.training.max_steps == spec.training.max_steps and trial.data == spec.data
    # The training loops build their optimizer from the trial config's training section.
    optimizer = make_optimizer(torch.nn.Linear(2, 2), trial.training)
    assert optimizer.param_groups[0]["lr"] == 0.0123


def test_trial_config_holds_the_trial_sections_only():
    spec = validate_spec(small_sweep("x"), base_dir=REPO)
    trial = spec.trial_config()
    assert isinstance(trial, TrialConfig) and trial.task == "sft"
    assert not {"search", "early_stopping", "tracking", "cost", "output_dir", "name"} & set(TrialConfig.model_fields)


def test_sampled_values_are_validated():
    trial = validate_spec(small_sweep("x"), base_dir=REPO).trial_config()
    with pytest.raises(ValidationError):
        trial.with_values({"training.learning_rate": -1})
    with pytest.raises(KeyError):
        trial.with_values({"search.num_trials": 3})
    with pytest.raises(KeyError, match="no dpo section"):
        trial.with_values({"dpo.beta": 0.2})


def test_user_error_is_an_input_error():
    # The CLI prints both as keyed lines with exit status 2.
    error = UserError("a: one", "b: two")
    assert isinstance(error, InputError) and error.lines == ["a: one", "b: two"] and error.exit_code == 2

