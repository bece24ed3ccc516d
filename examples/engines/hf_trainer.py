"""A Hugging Face `Trainer` as a training function for `trainer: function`
(docs/guides/engines.md): LoRA SFT of the sweep's model on the sweep's data, reporting
through the reporter's TrainerCallback. Run by examples/engines/function-hf.yaml:

    sweep start examples/engines/function-hf.yaml

`reporter.data` holds the `data` section tokenized (input_ids and loss labels per row);
`config["model_source"]` is where the base model loads from. The Trainer evaluates and
saves every training.eval_every steps; the callback reports each evaluation with the
Trainer's checkpoint, and `resume_from_checkpoint` continues a paused or resumed trial.
"""

from __future__ import annotations

import tempfile

import torch


def train(config: dict, reporter) -> None:
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    training, lora = config["training"], config["lora"]
    model = AutoModelForCausalLM.from_pretrained(config["model_source"], dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(
        r=lora["r"], lora_alpha=lora["alpha_per_rank"] * lora["r"] if lora["alpha_per_rank"] else lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=lora["target_modules"], task_type="CAUSAL_LM",
    ))
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else model.config.eos_token_id
    splits = {
        name: Dataset.from_dict({"input_ids": split.input_ids, "labels": split.labels})
        for name, split in reporter.data.items() if name in ("train", "eval")
    }

    def collate(rows):
        width = max(len(row["input_ids"]) for row in rows)
        def padded(key, value):
            return torch.tensor([row[key] + [value] * (width - len(row[key])) for row in rows])
        lengths = torch.tensor([len(row["input_ids"]) for row in rows])
        return {
            "input_ids": padded("input_ids", pad_id),
            "labels": padded("labels", -100),
            "attention_mask": (torch.arange(width)[None, :] < lengths[:, None]).long(),
        }

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-trainer-"),
        max_steps=training["max_steps"],
        learning_rate=training["learning_rate"],
        per_device_train_batch_size=training["per_device_batch_size"],
        per_device_eval_batch_size=training["per_device_batch_size"],
        lr_scheduler_type=training["lr_scheduler"] if training["lr_scheduler"] != "constant" else "constant_with_warmup",
        warmup_steps=int(training["warmup_ratio"] * training["max_steps"]),
        seed=training["seed"],
        eval_strategy="steps", eval_steps=training["eval_every"],
        save_strategy="steps", save_steps=training["eval_every"], save_total_limit=1,
        logging_steps=training["eval_every"],
        include_num_input_tokens_seen="non_padding",
        use_cpu=not config["resources"]["use_gpu"],
        report_to="none", disable_tqdm=True, remove_unused_columns=False,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=splits["train"], eval_dataset=splits["eval"],
        data_collator=collate, callbacks=[reporter.callback()],
    )
    trainer.train(resume_from_checkpoint=reporter.resume_from)
