"""The code of a promoted model: what `mlflow.pyfunc.load_model("models:/NAME@ALIAS")` runs.

`sweep promote` logs this file as an MLflow model from code (no pickle) with its
artifacts: the LoRA adapter, the tokenizer, best_config.yaml and the trial's metrics, and
with --merge the merged full weights. Loading builds the model the way the trial did:
the base through `trainables.models` (a hub id, a local directory, or the built-in tiny
model, rebuilt deterministically if missing) with the adapter on top; merged weights,
when logged, load on their own and need no base.

`predict` takes prompts (a list of strings, or a DataFrame whose first column holds them)
and returns the generated continuations (greedy; params max_new_tokens, chat). After
`unwrap_python_model()`, `.model` and `.tokenizer` serve forward passes directly.
"""

from __future__ import annotations

import mlflow
import pandas as pd
import torch


class LoraTextGenerator(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        from transformers import AutoModelForCausalLM

        from trainables.models import load_base_model, load_tokenizer, resolve_model_source

        artifacts, config = context.artifacts, context.model_config
        self.tokenizer = load_tokenizer(artifacts["tokenizer"])
        if "merged" in artifacts:
            self.model = AutoModelForCausalLM.from_pretrained(artifacts["merged"], dtype=torch.float32)
        else:
            from peft import PeftModel

            base = load_base_model(resolve_model_source(config["base_model"]), config.get("precision", "fp32"))
            self.model = PeftModel.from_pretrained(base, artifacts["adapter"])
        self.model.eval()

    @torch.no_grad()
    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> list[str]:
        # The DataFrame hint keeps the logged signature (prompts, and params max_new_tokens
        # and chat) in force: MLflow turns a list of prompts into a one-column frame.
        params = params or {}
        prompts = list(model_input.iloc[:, 0]) if isinstance(model_input, pd.DataFrame) else list(model_input)
        if params.get("chat"):
            prompts = [
                self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                )
                for prompt in prompts
            ]
        texts = []
        for prompt in prompts:
            ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
            output = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=int(params.get("max_new_tokens", 32)),
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            texts.append(self.tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True))
        return texts


mlflow.models.set_model(LoraTextGenerator())
