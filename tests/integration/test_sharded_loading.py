"""Sharded from the start: under FSDP and ZeRO-3 a trial's second worker never holds the
whole model while the model loads, measured by its peak resident memory during
`strategies.prepare` against the weights' full size, on a model of about 280 MB saved to a
folder and loaded through the same code as a hub id. DDP, where every worker holds the
whole model, is the control: the same measure shows the whole model there."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.conftest import REPO, small_sweep

pytestmark = pytest.mark.integration

# A Llama of about 71M parameters (284 MB in fp32), no tensor over 33 MB: a worker holding
# half of it stands clearly apart from one holding all of it.
SHAPE = dict(hidden_size=512, num_hidden_layers=16, intermediate_size=1536, num_attention_heads=8,
             num_key_value_heads=8, vocab_size=16000, tie_word_embeddings=False)
TINY = dict(hidden_size=16, num_hidden_layers=1, intermediate_size=32, num_attention_heads=2, num_key_value_heads=2,
            vocab_size=64)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> tuple[str, int]:
    """The model saved as safetensors, and its weights' size in bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPE, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    model.save_pretrained(folder)
    from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source

    load_tokenizer(resolve_model_source(BUILTIN_TINY_MODEL)).save_pretrained(folder)  # the spec asks for one
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    return str(folder), size


def _load_in_two_processes(rank: int, strategy: str, source: str, out: str, port: int) -> None:
    import psutil
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from sweeper.spec._load import validate_spec
    from trainables.common import current_workers
    from trainables.strategies import prepare

    resources = {"workers_per_trial": 2, "strategy": strategy}
    if strategy == "deepspeed":
        resources["deepspeed"] = {"zero_stage": 3}
    # What loading imports is code, not the model: imported before the measure.
    import deepspeed  # noqa: F401
    import peft  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import transformers.integrations  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM

    AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **TINY))  # transformers' lazy parts, in a few kB
    spec = validate_spec(small_sweep("s", model={"name_or_path": source}, resources=resources), base_dir=REPO)
    trial = spec.trial_config()
    workers = current_workers()
    process = psutil.Process()
    dist.barrier()
    before = process.memory_info().rss
    peak = [before]
    loading = threading.Event()
    loading.set()

    def sample():
        while loading.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    loaded = prepare(trial, source, workers)
    loading.clear()
    sampler.join()
    peak[0] = max(peak[0], process.memory_info().rss)
    # What this worker's parameters hold on its device now (its shards, or everything).
    local = 0
    for parameter in loaded.peft_model.parameters():
        tensor = getattr(parameter, "ds_tensor", None)
        if tensor is None:
            tensor = parameter.to_local() if hasattr(parameter, "to_local") else parameter
        local += tensor.numel() * tensor.element_size()
    Path(f"{out}.{rank}").write_text(json.dumps({"peak_rise": peak[0] - before, "local_bytes": local}))
    dist.destroy_process_group()


def loaded(tmp_path, strategy: str, source: str) -> list[dict]:
    """Each worker's peak rise of resident memory while `prepare` loads the model, and the
    bytes its parameters hold after. The workers' C allocator returns what they free to
    the system at once (a fixed mmap threshold): ZeRO-3 gathers each module's weights in
    turn, and a heap that keeps the freed blocks would show their sum, not what the worker
    holds."""
    out = tmp_path / f"{strategy}.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
        mp.spawn(_load_in_two_processes, args=(strategy, source, str(out), 29100 + os.getpid() % 400), nprocs=2)
    figures = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    print(f"{strategy}:", "; ".join(
        f"rank {rank} peak rise {f['peak_rise'] / 1e6:.0f} MB, holds {f['local_bytes'] / 1e6:.0f} MB" for rank, f in enumerate(figures)))
    return figures


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"], ids=["fsdp", "zero3"])
def test_the_second_worker_never_holds_the_whole_model_while_loading(tmp_path, model_folder, strategy):
    source, full = model_folder
    rank0, rank1 = loaded(tmp_path, strategy, source)
    # Its half (0.5), one module gathered or sent at a time and the engine's own buffers; never the whole.
    assert rank1["peak_rise"] < 0.85 * full, (rank1, full)
    assert rank1["local_bytes"] < 0.6 * full and rank0["local_bytes"] < 0.6 * full, (rank0, rank1, full)


def test_under_ddp_the_same_measure_shows_the_whole_model(tmp_path, model_folder):
    source, full = model_folder
    _, rank1 = loaded(tmp_path, "ddp", source)
    assert rank1["peak_rise"] > 0.9 * full and rank1["local_bytes"] >= full, (rank1, full)
