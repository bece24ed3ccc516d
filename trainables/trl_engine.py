"""One trial on trl's trainer (trainer: trl), top to bottom: the config, the model, the
data, the trainer, train. Ray Train's pattern for Hugging Face trainers: the trainer runs
inside each Train worker (`ray.train.huggingface.transformers.prepare_trainer`), and a
`TrainerCallback` reports each evaluation with the trainer's own checkpoint
(trainables/hf_reporting.py).

- Config: trl.method's config dataclass, from the sweep's sections (training.*,
  data.max_length, resources.use_gpu), the method's defaults, then every trl.<field>;
  evaluation, checkpoints and logging every training.eval_every steps.
- Model: the same base the built-in loop loads (trainables/models.py), LoRA from the
  `lora` section as the trainer's `peft_config`; for preference methods the reference is
  the base with the adapters disabled (trl's own handling of a peft model).
- Data: what the driver read from the `data` section (trainables/data.py): for sft the
  token ids and loss labels the built-in loop trains on, so trl tokenizes nothing; for the
  preference methods the rows as read (prompt, chosen, rejected; plain or chat), rendered
  by trl with the same tokenizer and chat template; kto gets them unpaired
  (trl.unpair_preference_dataset); grpo gets each row's prompt and reference answer
  (trainables/grpo.py), its eval split the sweep's eval sample (data.eval_samples, 16 rows unset),
  and the reward functions of trl.reward_funcs (a reward model by its id or folder, which trl loads).
- Resume: from a checkpoint folder the trainer wrote (`resume_from_checkpoint`), with
  trl.eval_on_start off: a trial evaluates before its first step (reported as step 0)
  in its first run only, never again when retried from, promoted at or resumed from a
  checkpoint.

Same signature as trainables/sft.py::train; what the built-in loop does and this engine
cannot is refused before launch (trainables/engines.py::engine_problems).
"""

from __future__ import annotations

import shutil
import tempfile

from trainables.common import Reporter, current_workers, seed_everything
from trainables.config import TrialConfig
from trainables.engines import PREFERENCE_METHODS, trl_config_class, trl_trainer_class
from trainables.grpo import reward_functions
from trainables.hf_reporting import ReportEvaluations
from trainables.models import load_base_model, load_tokenizer
from trainables.preemption import NO_NOTICE, PreemptionNotice

__all__ = ["train", "build_trainer", "trainer_arguments", "trl_fields", "trl_datasets"]

# The sweep's schedules -> transformers' lr_scheduler_type (warmup comes first in each).
_SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}


def train(
    config: TrialConfig,
    data: dict,
    model_source: str,
    report: Reporter,
    started_at: float,
    resume_from: str | None = None,
    memory_forecast_gib: float | None = None,
    preemption: PreemptionNotice = NO_NOTICE,
) -> None:
    """Train `model_source` with trl's trainer for trl.method, reporting at each
    evaluation. Arguments as in trainables/sft.py::train; `data` also holds the rows of
    each split ("train_rows", "eval_rows") for the preference methods and grpo."""
    method, training = config.trl.method, config.training
    workers = current_workers()
    output_dir = tempfile.mkdtemp(prefix="sweeper-trl-")

    # Config: the sweep's sections, then trl.<field>; evaluate, save and log at the sweep's steps.
    args = trl_config_class(method)(**trainer_arguments(config, output_dir), **trl_fields(config, resume_from))
    callback = ReportEvaluations(report, training.max_steps, started_at, is_main=workers.is_main,
                                 eval_every=training.eval_every)
    trainer = _prepared_for_ray(build_trainer(config, data, model_source, args, [callback]))
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:  # each report's checkpoint is in the sweep's storage by now
        shutil.rmtree(output_dir, ignore_errors=True)


def build_trainer(config: TrialConfig, data: dict, model_source: str, args, callbacks: list):
    """trl's trainer for trl.method as a trial builds it, with `args` (the method's config
    dataclass) and `callbacks`: the base and tokenizer as the built-in loop loads them, LoRA
    from the `lora` section as its peft_config, the data in the form the method takes,
    grpo's reward functions; no printing (the sweep's live table and MLflow show the metrics)."""
    from peft import LoraConfig
    from transformers import PrinterCallback

    method, training = config.trl.method, config.training
    model = load_base_model(model_source, training.precision, attn_implementation=config.model.attn_implementation)
    tokenizer = load_tokenizer(model_source)
    lora = config.lora
    peft_config = LoraConfig(
        r=lora.r, lora_alpha=lora.effective_alpha, lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules), task_type="CAUSAL_LM",
    )
    train_set, eval_set = trl_datasets(method, data)
    seed_everything(training.seed)  # the adapters start as the built-in loop's do: peft draws them in the trainer
    rewards = {"reward_funcs": reward_functions(config.trl.reward_funcs)} if method == "grpo" else {}
    trainer = trl_trainer_class(method)(
        model=model, args=args, train_dataset=train_set, eval_dataset=eval_set, processing_class=tokenizer,
        peft_config=peft_config, callbacks=callbacks, **rewards,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def trl_fields(config: TrialConfig, resume_from: str | None = None) -> dict:
    """The trl section's fields for the trainer's config (the method's defaults, then the
    sweep's trl.<field>), with eval_on_start off for a run that resumes from a checkpoint:
    the Trainer would evaluate again before its first step, at the checkpoint's step, whose
    evaluation was reported; the step-0 evaluation belongs to the trial's first run only."""
    fields = config.trl.config_kwargs()
    if resume_from is not None:
        fields["eval_on_start"] = False
    return fields


def trainer_arguments(config: TrialConfig, output_dir: str) -> dict:
    """The trainer config's fields that the sweep's own sections set, and those the engine
    sets for evaluation, checkpoints and reports at every training.eval_every steps."""
    training = config.training
    arguments = {
        "output_dir": output_dir,
        "max_steps": training.max_steps,
        "learning_rate": training.learning_rate,
        "per_device_train_batch_size": training.per_device_batch_size,
        "per_device_eval_batch_size": training.per_device_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
        "lr_scheduler_type": _SCHEDULES[training.lr_scheduler],
        "warmup_steps": int(round(training.warmup_ratio * training.max_steps)),
        "weight_decay": training.weight_decay,
        "max_grad_norm": training.max_grad_norm,
        "seed": training.seed,
        "data_seed": training.seed,
        "bf16": training.precision == "bf16",
        "fp16": training.precision == "fp16",
        "use_cpu": not config.resources.use_gpu,
        "gradient_checkpointing": training.gradient_checkpointing,
        "torch_compile": training.compile,
        "max_length": config.data.max_length,
        "eval_strategy": "steps",
        "eval_steps": training.eval_every,
        "save_strategy": "steps",
        "save_steps": training.eval_every,
        "save_total_limit": 1,
        "logging_strategy": "steps",
        "logging_steps": training.eval_every,
        # ORPO's and CPO's batches have no input_ids for the Trainer to count.
        "include_num_input_tokens_seen": "no" if config.trl.method in ("orpo", "cpo", "simpo") else "non_padding",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    if config.trl.method == "grpo":
        # GRPOConfig has no max_length (trl.max_completion_length bounds a completion), and
        # GRPOTrainer counts its prompt and completion tokens itself.
        del arguments["max_length"]
        arguments["include_num_input_tokens_seen"] = "no"
    return arguments


def trl_datasets(method: str, data: dict):
    """The train and eval datasets in the form trl's trainer for `method` takes."""
    from datasets import Dataset

    if method not in (*PREFERENCE_METHODS, "grpo"):  # sft: the driver's token ids and labels
        return tuple(
            Dataset.from_dict({"input_ids": data[split].input_ids, "labels": data[split].labels})
            for split in ("train", "eval")
        )
    sets = [Dataset.from_list(data[f"{split}_rows"]) for split in ("train", "eval")]
    if method == "kto":
        from trl import unpair_preference_dataset

        sets = [unpair_preference_dataset(dataset) for dataset in sets]
    return tuple(sets)


def _prepared_for_ray(trainer):
    """Ray Train's wrapper of a Hugging Face trainer: it feeds a Ray Data iterable to the
    trainer's data loaders and passes a plain dataset (ours) through; applied as Ray's
    guide for transformers does."""
    from ray.train.huggingface.transformers import prepare_trainer

    return prepare_trainer(trainer)
