"""A model's architecture from its config alone, never its weights: the one reader behind
the throughput model (parameters -> FLOPs and bytes) and the memory forecast.

Where the config comes from, in order: the built-in tiny model's shape
(`trainables.tiny.shape`), a table of common hub models (so that forecasts work
offline), a local folder's config.json (an adapter folder: its base's), the Hugging Face
cache, else (for the memory forecast only) the hub through transformers (config.json only). Failing all, a size in a
hub id's name ("Qwen2.5-0.5B" is 0.5e9 parameters) still gives the parameter count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from trainables import tiny
from trainables.sections import BUILTIN_SMOLLM2, BUILTIN_TINY_MODEL

__all__ = ["Architecture", "KNOWN_CONFIGS", "architecture_of", "parameter_count"]


@dataclass(frozen=True)
class Architecture:
    """The numbers of a decoder-only transformer (Llama-style: grouped key/value heads, a
    gated MLP) that its size and memory depend on."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool
    head_dim: int  # hidden // heads where the config leaves it out

    @classmethod
    def from_config(cls, config: dict) -> "Architecture":
        heads, hidden = config["num_attention_heads"], config["hidden_size"]
        return cls(
            hidden, config["num_hidden_layers"], config["intermediate_size"], heads,
            kv_heads=config.get("num_key_value_heads") or heads, vocab=config["vocab_size"],
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            head_dim=config.get("head_dim") or hidden // heads,
        )

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values): grouped heads share them."""
        return self.head_dim * self.kv_heads

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one layer, by the module name LoRA targets."""
        h, i, q, kv = self.hidden, self.intermediate, self.head_dim * self.heads, self.kv_width
        return {
            "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }

    @property
    def layer_linear_params(self) -> int:
        return sum(a * b for a, b in self.linear_shapes().values())

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        """Every parameter, frozen and trainable: projections, norms, embeddings and head."""
        norms = (2 * self.layers + 1) * self.hidden
        return self.layers * self.layer_linear_params + self.embedding_params + norms


def _config(hidden, layers, intermediate, heads, kv_heads, vocab, tied) -> dict:
    return {
        "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": intermediate,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


# The published config.json numbers of common base models, so that a forecast needs no
# download (hub ids not listed are read from the cache or the hub's config.json).
KNOWN_CONFIGS = {
    "meta-llama/Llama-3.1-8B": _config(4096, 32, 14336, 32, 8, 128256, False),
    "meta-llama/Llama-3.1-70B": _config(8192, 80, 28672, 64, 8, 128256, False),
    "meta-llama/Llama-3.2-1B": _config(2048, 16, 8192, 32, 8, 128256, True),
    "meta-llama/Llama-3.2-3B": _config(3072, 28, 8192, 24, 8, 128256, True),
    "Qwen/Qwen2.5-0.5B": _config(896, 24, 4864, 14, 2, 151936, True),
    "Qwen/Qwen2.5-1.5B": _config(1536, 28, 8960, 12, 2, 151936, True),
    "Qwen/Qwen2.5-7B": _config(3584, 28, 18944, 28, 4, 152064, False),
    "mistralai/Mistral-7B-v0.3": _config(4096, 32, 14336, 32, 8, 32768, False),
}
for _name in list(KNOWN_CONFIGS):
    KNOWN_CONFIGS[_name + "-Instruct"] = KNOWN_CONFIGS[_name]
KNOWN_CONFIGS["meta-llama/Llama-3.1-8B-Instruct"] = KNOWN_CONFIGS["meta-llama/Llama-3.1-8B"]
KNOWN_CONFIGS[BUILTIN_TINY_MODEL] = tiny.shape()
# SmolLM2-135M-Instruct's config.json (what the conversion of its GGUF file writes).
KNOWN_CONFIGS[BUILTIN_SMOLLM2] = _config(576, 30, 1536, 9, 3, 49152, True)


def architecture_of(name_or_path: str, from_hub: bool = True) -> Architecture | None:
    """The model's architecture from its config alone, or None when no config can be read
    (no network, no such model, an architecture without these fields). `from_hub=False`:
    never ask the hub (offline, Hugging Face retries for about 20 s before it gives up)."""
    config = _config_of(name_or_path, from_hub)
    try:
        return Architecture.from_config(config) if config is not None else None
    except KeyError:
        return None


def parameter_count(name_or_path: str) -> int | None:
    """Parameters of the base model (frozen and trainable): from its architecture (known,
    local or cached: the throughput model and the budget check never wait on the hub),
    else from a size in a hub id's name; None when neither says."""
    arch = architecture_of(name_or_path, from_hub=False)
    if arch is not None:
        return arch.params
    match = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", name_or_path.split("/")[-1])
    return int(float(match.group(1)) * 1e9) if match else None


def _config_of(name_or_path: str, from_hub: bool) -> dict | None:
    if name_or_path in KNOWN_CONFIGS:
        return KNOWN_CONFIGS[name_or_path]
    folder = Path(name_or_path).expanduser()
    try:
        if (folder / "adapter_config.json").is_file():
            base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
            return _config_of(base, from_hub)
        if (folder / "config.json").is_file():
            return _text_config(json.loads((folder / "config.json").read_text()))
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name_or_path, "config.json")
        if isinstance(cached, str):
            return _text_config(json.loads(Path(cached).read_text()))
        if not from_hub:
            return None
        from transformers import AutoConfig  # a hub id: its config.json only, no weights

        return _text_config(AutoConfig.from_pretrained(name_or_path).to_dict())
    except Exception:  # not a valid repo id, no network, no such model
        return None


def _text_config(config: dict) -> dict:
    """A multimodal config's language model part (its `text_config`), else the config."""
    return config.get("text_config") or config
