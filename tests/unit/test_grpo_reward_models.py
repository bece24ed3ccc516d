"""Reward models in trl.reward_funcs (trainables/reward_models.py): an entry that is not
FILE.py:FUNCTION is the hub id or local folder of a sequence-classification model with one
label. Before any trial it is loaded as trl loads it and scores the references once; one
that is not found, is no such model, or cannot score is one keyed line. Trials pass trl
the folder, and its reward is reported as eval_reward_<folder name>, the name trl logs it
under. Models are tiny random Llamas saved into tmp_path: no network."""

from __future__ import annotations

import pytest

from sweeper.spec._load import validate_spec
from tests.unit.test_grpo_spec import grpo_sweep, refused


def save_model(folder, *, labels: int = 1, causal: bool = False, tokenizer: bool = True, chat: bool = True):
    """A 1-layer Llama (sequence classification with `labels` labels, or a causal LM) with
    random weights and the built-in byte-level tokenizer, saved to `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    from trainables.tiny import build_tokenizer, shape

    tok = build_tokenizer()
    if not chat:
        tok.chat_template = None
    config = LlamaConfig(**shape(32, 1), num_labels=labels, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    (LlamaForCausalLM if causal else LlamaForSequenceClassification)(config).save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    return folder


def test_a_reward_model_folder_beside_the_sweep_file_validates_and_reports_under_its_name(tmp_path):
    from typer.testing import CliRunner

    from sweeper.cli import app
    from sweeper.spec._objectives import rankable_metrics
    from tests.conftest import write_yaml
    from trainables.grpo import reward_functions

    save_model(tmp_path / "judge")
    raw = grpo_sweep(tmp_path)
    raw["trl"]["reward_funcs"] = ["rewards.py:correct", "judge"]
    raw["trl"]["reward_weights"] = [1.0, 0.5]
    raw["search"].update(metric="eval_reward_judge", goal="maximize")
    spec = validate_spec(raw, base_dir=tmp_path)
    assert spec.trl.reward_funcs == [f"{tmp_path / 'rewards.py'}:correct", str(tmp_path / "judge")]
    assert {"eval_reward_correct", "eval_reward_judge"} <= set(rankable_metrics(spec))
    # trl gets the function, and the model by its folder (trl loads it).
    function, model = reward_functions(spec.trl.reward_funcs)
    assert callable(function) and model == str(tmp_path / "judge")
    result = CliRunner().invoke(app, ["validate", str(write_yaml(tmp_path / "g.yaml", raw))])
    assert result.exit_code == 0, result.output


def test_a_hub_id_stays_a_hub_id_and_names_its_reward_after_the_last_part(tmp_path):
    from trainables.reward_models import reward_name

    raw = grpo_sweep(tmp_path)
    raw["trl"]["reward_funcs"] = ["OpenAssistant/reward-model-deberta-v3-large-v2"]
    spec = validate_spec(raw, base_dir=tmp_path)  # the schema alone: the Hub is asked by the checks before a trial
    assert spec.trl.reward_funcs == ["OpenAssistant/reward-model-deberta-v3-large-v2"]
    assert reward_name(spec.trl.reward_funcs[0]) == "reward-model-deberta-v3-large-v2"
    assert reward_name("/abs/folder/judge/") == "judge" and reward_name("/x/r.py:correct") == "correct"


@pytest.mark.parametrize("case, entry, build, line", [
    ("no folder", "./nowhere", None, "trl.reward_funcs.1: no model folder at {tmp}/nowhere; give a sequence-classification"),
    ("a causal LM", "lm", dict(causal=True),
     "trl.reward_funcs.1: {tmp}/lm is no sequence-classification model (architectures: LlamaForCausalLM)"),
    ("two labels", "two", dict(labels=2),
     "trl.reward_funcs.1: {tmp}/two has 2 labels; trl loads a reward model with num_labels=1"),
    ("no tokenizer", "bare", dict(tokenizer=False),
     "trl.reward_funcs.1: cannot load a tokenizer from {tmp}/bare (trl loads the reward model's own)"),
    ("no chat template for chat rows", "plain", dict(chat=False),
     "trl.reward_funcs.1: the sweep's rows are chat, and {tmp}/plain's tokenizer has no chat template"),
    ("a second model of one name", "other/judge", None,
     "trl.reward_funcs: entry 1: a reward named 'judge' is reported as eval_reward_judge"),
    ("not an entry", "judge.py", None, "trl.reward_funcs: entry 1: expected FILE.py:FUNCTION or a reward model"),
])
def test_a_reward_model_that_trl_could_not_use_is_one_keyed_line_exit_2(tmp_path, case, entry, build, line):
    if build is not None:
        save_model(tmp_path / entry, **build)
    raw = grpo_sweep(tmp_path)
    if case == "a second model of one name":
        save_model(tmp_path / "judge")
        (tmp_path / "other").mkdir()
        save_model(tmp_path / "other" / "judge")
        raw["trl"]["reward_funcs"] = ["judge", "./other/judge"]
    else:
        raw["trl"]["reward_funcs"] = ["rewards.py:correct", entry]
    assert refused(tmp_path, raw).startswith(line.format(tmp=tmp_path)), case


def test_a_hub_id_neither_cached_nor_reachable_is_one_keyed_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    raw = grpo_sweep(tmp_path)
    raw["trl"]["reward_funcs"] = ["no-such-org/no-such-reward-model"]
    assert refused(tmp_path, raw).startswith(
        "trl.reward_funcs.0: no-such-org/no-such-reward-model is neither a folder beside the sweep file nor a model in "
        "the Hugging Face cache, and the Hub cannot be reached (HF_HUB_OFFLINE is set)")


def test_a_reward_model_scores_chat_and_plain_prompts_as_trl_does(tmp_path):
    """The check scores what GRPOTrainer._calculate_rewards scores: prompt + completion
    (chat rendered with the reward model's template), padded right, the logit at the last
    token that is not padding; each row's score does not depend on the others' padding."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from trainables.reward_models import reward_model_problem

    folder = str(save_model(tmp_path / "judge"))
    chat = [[{"role": "user", "content": "Add: 2+2"}], [{"role": "user", "content": "Add: 10+20"}]]
    answers = [[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "30, the sum"}]]
    assert reward_model_problem(folder, chat, answers, {}) is None
    assert reward_model_problem(folder, ["Add: 2+2 =", "Add: 10+20 ="], [" 4", " 30"], {}) is None
    # The last real token's logit, whatever the padding: one row alone scores as in a batch.
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = ["Add: 2+2 = 4", "Add: 10+20 = 30, the sum"]
    with torch.inference_mode():
        batch = model(**tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right",
                                  add_special_tokens=False)).logits[:, 0]
        alone = model(**tokenizer(text=texts[:1], return_tensors="pt", add_special_tokens=False)).logits[:, 0]
    assert torch.allclose(batch[:1], alone, atol=1e-5)


def test_grpo_trainer_loads_the_folder_and_logs_its_reward_as_the_sweep_reports_it(tmp_path):
    """trl's GRPOTrainer, given the folder as the sweep passes it, names the reward after
    the folder: its eval_rewards/<name>/mean is the sweep's eval_reward_<name>."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainables.engines import trl_config_class, trl_trainer_class
    from trainables.reward_models import reward_name
    from trainables.hf_reporting import sweep_metrics
    from trainables.tiny import build_tokenizer, shape

    folder = str(save_model(tmp_path / "judge"))
    tokenizer = build_tokenizer()
    policy = LlamaForCausalLM(LlamaConfig(**shape(32, 1), pad_token_id=tokenizer.pad_token_id,
                                          eos_token_id=tokenizer.eos_token_id, bos_token_id=None))
    args = trl_config_class("grpo")(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, per_device_eval_batch_size=2,
        num_generations=2, max_completion_length=4, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, dataloader_num_workers=0,
    )
    from datasets import Dataset

    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Add: {i}+{i}"}], "reference": str(2 * i)}
                              for i in range(2)])
    trainer = trl_trainer_class("grpo")(model=policy, args=args, train_dataset=rows, eval_dataset=rows,
                                        processing_class=tokenizer, reward_funcs=[folder])
    assert trainer.reward_func_names == [reward_name(folder)] == ["judge"]
    metrics = trainer.evaluate()
    assert "eval_reward_judge" in sweep_metrics(metrics), metrics
    trainer.train()
    assert any("rewards/judge/mean" in log for log in trainer.state.log_history), trainer.state.log_history
