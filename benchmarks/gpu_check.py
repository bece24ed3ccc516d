"""The GPU check: real figures for what a GPU sweep runs, in one command of under five
minutes, against our forecasts. On the GPU machine (see benchmarks/README.md, "GPU check"):

    bash benchmarks/gpu_check.sh $OUT            # installs the wheels that travelled, then this
    python benchmarks/gpu_check.py OUT_DIR --cpu # a tiny shape on CPU, the same code (the suite runs it)

Writes OUT_DIR/gpu_check.md and OUT_DIR/gpu_check.json: one line per measurement, each with
its figure and our forecast where we have one, or the reason it was skipped; both are
rewritten after every line, and OUT_DIR/gpu_check.jsonl gets each line as it ends, so a
run killed midway leaves the lines it finished. The first line measures the device's
ceilings (a bf16 matrix product and a device-to-device copy); every line records the
allocator's peaks (`max_memory_allocated`, `max_memory_reserved`) and the device memory in
use (all processes, `torch.cuda.mem_get_info`).

No Ray, Optuna, MLflow, trl or DeepSpeed is needed (none of them is on the GPU machine, and
Ray's wheel alone is over what one command can carry): each line runs the trial's own step
from trainables/ (`sft.train_step`, `dpo.train_step`, through `MicroBatches.run`, which
handles running out of memory, and the ddp `Strategy`) on a model of a real architecture
built from its config with random weights on the GPU (no download is possible there).
Only the model's setup differs from a trial's: built from its config on the device instead
of read from a folder (QLoRA's base is written to a folder and read back through
`load_base_model`, as a trial reads it, to be quantized). Forecasts: the memory forecast of
`sweep plan` (sweeper/cost/_memory.py) and the dense bf16 peaks of sweeper/cost/_throughput.py,
both fixed before the run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: the repo's packages
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from sweeper.cost import KNOWN_CONFIGS, Architecture  # noqa: E402
from sweeper.cost import forecast_trial_memory  # noqa: E402
from sweeper.cost import PEAK_TFLOPS  # noqa: E402
from benchmarks.packing import chat_lengths  # noqa: E402
from trainables import dpo, sft  # noqa: E402
from trainables.common import Workers, endless_batches, packing_layout, report_with_checkpoint  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402
from trainables.data import IGNORE_INDEX, PreferenceSplit, TokenizedSplit  # noqa: E402
from trainables.models import load_base_model  # noqa: E402
from trainables.out_of_memory import MicroBatches, TrialOutOfMemory  # noqa: E402
from trainables.sections import BUILTIN_TINY_MODEL  # noqa: E402
from trainables.strategies import DdpStrategy, adapt  # noqa: E402

GIB = 1024**3
MODEL_1B, MODEL_8B = "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B"
# The targets of the issue that asked for this check (benchmarks/README.md, "GPU check").
MFU_TARGET, MEMORY_TOLERANCE, PACKING_TARGET, VARLEN_TARGET = 0.30, 0.10, 2.0, 1.5
# The micro-batches of the H100 table (benchmarks/README.md), so that figures compare.
MICRO_BATCHES = {"sft_1b": 16, "sft_1b_checkpointing": 32, "sft_8b_checkpointing": 16, "qlora_8b": 8,
                 "sft_1b_compiled": 16}
PACKING_COPIES = 4


@dataclass
class Line:
    name: str
    what: str
    figure: str = ""
    forecast: str = ""
    verdict: str = ""
    skipped: str = ""  # the reason, where the line did not run
    values: dict = field(default_factory=dict)

    def cells(self) -> list[str]:
        if self.skipped:
            return [self.name, self.what, f"skipped: {self.skipped}", "", ""]
        return [self.name, self.what, self.figure, self.forecast or "no forecast", self.verdict]


@dataclass
class Setting:
    """Where the check runs: the shapes, sizes and timings of each line."""

    device: torch.device
    model_1b: str
    model_8b: str
    sequence: int
    timed_steps: int
    warmup_steps: int
    packing_sequence: int
    packing_seconds: float
    card_gib: float | None
    peak_tflops: float | None  # dense bf16 peak of the device (all cores on a CPU)
    deadline: float
    measured_tflops: float | None = None  # the bf16 matmul ceiling the first line measured

    @property
    def cpu(self) -> bool:
        return self.device.type == "cpu"

    def time_left(self) -> float:
        return self.deadline - time.time()


# ---------------------------------------------------------------- the trial of a line


def trial_config(model: str, setting: Setting, *, micro_batch: int, sequence: int, checkpointing: bool,
                 quantization: str = "none", task: str = "sft", chaos: str = "none",
                 compiled: bool = False, packing: bool = False) -> TrialConfig:
    """The TrialConfig a sweep's trial of this shape would get (bf16, sdpa, LoRA r 16 on
    every projection, ddp, one worker)."""
    raw = {
        "task": task,
        "model": {"name_or_path": model, "quantization": quantization, "attn_implementation": "sdpa"},
        "data": {"train": "unused.jsonl", "eval": "unused.jsonl", "max_length": sequence, "packing": packing},
        "training": {"max_steps": 1000, "eval_every": 1000, "per_device_batch_size": micro_batch,
                     "precision": "bf16", "gradient_checkpointing": checkpointing, "learning_rate": 1e-4,
                     "compile": compiled},
        "lora": {"r": 16, "alpha": 32, "dropout": 0.05},
        "resources": {"use_gpu": not setting.cpu},
        "chaos": {"fault": chaos, "at_step": 1},
        **({"dpo": {"beta": 0.1, "max_prompt_length": sequence // 2}} if task == "dpo" else {}),
    }
    return TrialConfig.model_validate(raw, context={"check_files": False})


# As Llama-3.1-Instruct's config: a list of eos ids and no pad id.
EOS_IDS = [1, 2, 3]


def build_strategy(trial: TrialConfig, workers: Workers, folder: Path | None = None) -> DdpStrategy:
    """The trial's model (random weights of the shape trial.model names, on the device)
    with fresh adapters, as `trainables.strategies.prepare` makes it, and its ddp strategy.
    Its config has no pad id and a list of eos ids (EOS_IDS). A quantized base is written
    to `folder` and read back quantized, as a trial loads it."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    shape = KNOWN_CONFIGS[trial.model.name_or_path]
    config = LlamaConfig(**shape, pad_token_id=None, bos_token_id=None, eos_token_id=EOS_IDS,
                         max_position_embeddings=max(4096, trial.data.max_length))
    with torch.device(workers.device):  # weights made where they train, in bf16 as load_base_model loads them
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                 attn_implementation=trial.model.attn_implementation)
    if trial.model.quantization != "none":
        model.save_pretrained(folder)
        del model
        free_memory()
        model = load_base_model(str(folder), trial.training.precision, quantization=trial.model.quantization,
                                attn_implementation=trial.model.attn_implementation, device=workers.device)
    return DdpStrategy(trial, adapt(model, trial), workers)


def random_split(rows: int, sequence: int, vocab: int, seed: int) -> TokenizedSplit:
    """Rows of `sequence` random tokens (never the pad token 0), every token a target."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(EOS_IDS[-1] + 1, vocab, (rows, sequence), generator=generator).tolist()
    return TokenizedSplit(input_ids=ids, labels=[list(row) for row in ids], pad_id=0)


# A turn closes every this many tokens of a chat row (its eos, as Qwen's <|im_end|>).
TURN = 64


def chat_split(rows: int, longest: int, vocab: int, seed: int) -> TokenizedSplit:
    """Rows of the length spread of chat SFT data (benchmarks/packing.py, scaled to
    `longest`), random tokens with an eos closing each turn of TURN tokens, the pad id that
    same eos (as a tokenizer whose pad is its eos); the second half of each row a target."""
    from trainables.data import IGNORE_INDEX as IGNORE

    generator = torch.Generator().manual_seed(seed)
    scale = longest / 1024
    lengths = [max(8, round(length * scale)) for length in chat_lengths(rows, seed)]
    eos = EOS_IDS[-1]
    ids = []
    for length in lengths:
        row = torch.randint(EOS_IDS[-1] + 1, vocab, (length,), generator=generator)
        row[TURN - 1 :: TURN] = eos
        ids.append(row.tolist())
    labels = [[IGNORE] * (len(row) // 2) + row[len(row) // 2 :] for row in ids]
    return TokenizedSplit(input_ids=ids, labels=labels, pad_id=eos)


def random_pairs(rows: int, sequence: int, vocab: int) -> PreferenceSplit:
    """Pairs with a shared prompt of half the sequence; only the answers are targets."""
    chosen, rejected = random_split(rows, sequence, vocab, 1), random_split(rows, sequence, vocab, 2)
    prompt = sequence // 2
    for row in range(rows):
        rejected.input_ids[row][:prompt] = chosen.input_ids[row][:prompt]
        for split in (chosen, rejected):
            split.labels[row] = [IGNORE_INDEX] * prompt + split.input_ids[row][prompt:]
    return PreferenceSplit(chosen, rejected)


@dataclass
class Measured:
    tokens: int
    seconds: float
    peak_gib: float | None
    micro_batch: int  # the micro-batch the steps ended at (halved after running out of memory)
    out_of_memory: str = ""  # the reason of a trial that could not go on
    memory: dict = field(default_factory=dict)  # memory_state at the end of the timed steps


def train_steps(trial: TrialConfig, workers: Workers, steps: int, warmup: int, folder: Path | None = None,
                split=None) -> Measured:
    """`warmup` then `steps` optimizer steps of the trial's own step function, timed after
    the warm-up; the peak memory of the timed steps (weights, adapters' optimizer state and
    what a step holds: what the forecast is of; a micro-batch that ran out of memory in the
    warm-up and was halved is not in it). The model is gone from the device when this
    returns. `split`: the rows to train on (random rows of data.max_length if None)."""
    try:
        return _timed_steps(trial, workers, steps, warmup, folder, split)
    finally:
        free_memory()  # the frame that held the model has ended


def _timed_steps(trial: TrialConfig, workers: Workers, steps: int, warmup: int, folder: Path | None,
                 split) -> Measured:
    strategy = build_strategy(trial, workers, folder)
    task = dpo if trial.task == "dpo" else sft
    vocab = KNOWN_CONFIGS[trial.model.name_or_path]["vocab_size"]
    training = trial.training
    rows = training.per_device_batch_size * training.gradient_accumulation_steps * (steps + warmup)
    if split is None:
        make = random_pairs if trial.task == "dpo" else lambda r, s, v: random_split(r, s, v, 0)
        split = make(rows, trial.data.max_length, vocab)
    micro_batches = MicroBatches(trial, strategy, workers, memory_forecast_gib=forecast_gib(trial))
    batches = endless_batches(len(split), training.per_device_batch_size, workers, seed=0)
    tokens, started = 0, time.perf_counter()
    try:
        for step in range(1, warmup + steps + 1):
            if step == warmup + 1:
                synchronize(workers)
                reset_peak(workers)
                tokens, started = 0, time.perf_counter()
            strategy.model.train()  # as the trial's loop does: from_pretrained (a quantized base) loads in eval mode
            step_batches = [next(batches) for _ in range(training.gradient_accumulation_steps)]
            _, step_tokens = micro_batches.run(
                step, step_batches,
                lambda parts: step_of(task, parts, strategy, split, workers, trial, step),  # noqa: B023
            )
            strategy.step()
            tokens += step_tokens
        synchronize(workers)
        seconds = time.perf_counter() - started
        return Measured(tokens, seconds, peak_gib(workers), micro_batches.size, memory=memory_state(workers))
    except TrialOutOfMemory as failed:
        return Measured(0, 0.0, peak_gib(workers), micro_batches.size, out_of_memory=str(failed),
                        memory=memory_state(workers))


def step_of(task, parts, strategy, split, workers: Workers, trial: TrialConfig, step: int) -> tuple[float, int]:
    """The task's train_step as the trial's loop calls it."""
    if task is dpo:
        return dpo.train_step(parts, strategy, split, workers, trial, 1.0, step)
    return sft.train_step(parts, strategy, split, workers, trial.training, 1.0, step, packing_layout(trial))


def forecast_gib(trial: TrialConfig) -> float | None:
    estimate = forecast_trial_memory(trial, lora_r=trial.lora.r)
    return estimate.gib if estimate is not None else None


# ---------------------------------------------------------------- the lines


def sft_line(setting: Setting, workers: Workers, name: str, size: str, checkpointing: bool,
             quantization: str = "none", compiled: bool = False) -> Line:
    model = setting.model_8b if size == "8B" else setting.model_1b
    micro = 2 if setting.cpu else MICRO_BATCHES[name]
    trial = trial_config(model, setting, micro_batch=micro, sequence=setting.sequence, checkpointing=checkpointing,
                         quantization=quantization, compiled=compiled)
    what = (f"LoRA SFT {'QLoRA nf4' if quantization == 'nf4' else 'bf16'} sdpa, {size} shape, micro-batch {micro} x "
            f"{setting.sequence}{', gradient checkpointing' if checkpointing else ''}"
            f"{', training.compile' if compiled else ''}")
    with tempfile.TemporaryDirectory(prefix="gpu-check-base-") as folder:
        measured = train_steps(trial, workers, setting.timed_steps, setting.warmup_steps, Path(folder))
    line = Line(name, what)
    if measured.out_of_memory:
        line.figure = f"did not fit: {measured.out_of_memory}"
        line.verdict = "forecast too low" if quantization == "none" else ""
        return line
    tokens_per_second = measured.tokens / measured.seconds
    arch = Architecture.from_config(KNOWN_CONFIGS[model])
    matmul_params = arch.layers * arch.layer_linear_params + arch.vocab * arch.hidden  # the head, not the lookup
    lora_flops = 4 * matmul_params * measured.tokens
    attention_flops = 12 * arch.layers * setting.sequence * arch.heads * arch.head_dim * measured.tokens
    figures = [f"{tokens_per_second:,.0f} tokens/s"]
    verdicts = []
    if setting.peak_tflops:
        mfu = lora_flops / measured.seconds / (setting.peak_tflops * 1e12)
        mfu_attention = (lora_flops + attention_flops) / measured.seconds / (setting.peak_tflops * 1e12)
        figures.append(f"MFU {mfu:.1%} (4 x {count(matmul_params)} x tokens; {mfu_attention:.1%} with attention)")
        line.values.update(mfu=mfu, mfu_with_attention=mfu_attention)
        if setting.measured_tflops:
            of_ceiling = lora_flops / measured.seconds / (setting.measured_tflops * 1e12)
            figures.append(f"{of_ceiling:.1%} of the measured matmul ceiling")
            line.values["of_measured_ceiling"] = of_ceiling
        if size == "1B" and not checkpointing and not setting.cpu:
            verdicts.append(f"MFU {'meets' if mfu >= MFU_TARGET else 'below'} the {MFU_TARGET:.0%} target")
    if measured.micro_batch != micro:
        figures.append(f"went on at micro-batch {measured.micro_batch} after running out of memory at {micro}")
    line.figure = "; ".join(figures)
    line.values.update(tokens_per_second=tokens_per_second, micro_batch=measured.micro_batch)
    memory_line(line, setting, trial, measured, verdicts)
    return line


def memory_line(line: Line, setting: Setting, trial: TrialConfig, measured: Measured, verdicts: list[str]) -> None:
    """The peaks against the forecast (of the micro-batch the steps ended at): its error
    against `max_memory_reserved`, what the card must hold."""
    estimate = forecast_trial_memory(trial.with_values({"training.per_device_batch_size": measured.micro_batch}),
                                     lora_r=trial.lora.r)
    line.forecast = f"{size(estimate.gib)} ({estimate.what})" if estimate else ""
    if measured.peak_gib is None:
        line.figure += "; peak memory n/a (CPU: no allocator peak)"
    else:
        line.figure += f"; peak {size(measured.peak_gib)} allocated"
        if measured.memory:
            line.figure += (f", {size(measured.memory['max_memory_reserved_gib'])} reserved, "
                            f"{size(measured.memory['device_in_use_gib'])} of the device in use")
        line.values["peak_gib"] = measured.peak_gib
        line.values["memory"] = measured.memory
        if estimate:
            # against what the allocator held at its peak (the card must have that much)
            held = measured.memory.get("max_memory_reserved_gib", measured.peak_gib)
            error = estimate.gib / held - 1
            line.values["forecast_gib"], line.values["forecast_error"] = estimate.gib, error
            if trial.training.compile:  # the forecast has no compiled variant: inductor's fusions keep less
                verdicts.append(f"forecast {error:+.0%} (of the eager step: an upper bound here)")
            else:
                verdicts.append(f"forecast {error:+.0%} of reserved ({'within' if abs(error) <= MEMORY_TOLERANCE else 'outside'} "
                                f"{MEMORY_TOLERANCE:.0%})")
    line.verdict = "; ".join(verdicts)


def ceiling_line(setting: Setting, workers: Workers) -> Line:
    """What the device reaches at best: a bf16 matrix product (n x n by n x n) and a copy
    of a large tensor on the device (bytes read plus bytes written per second); the MFU
    lines state their figure against this ceiling as well as against the datasheet's."""
    n, copy_bytes = (512, 64 * 1024**2) if setting.cpu else (8192, 2 * GIB)
    a = torch.randn(n, n, device=workers.device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=workers.device, dtype=torch.bfloat16)
    matmul_seconds = best_of(lambda: torch.mm(a, b), workers, repeats=3 if setting.cpu else 20)
    source = torch.empty(copy_bytes, dtype=torch.uint8, device=workers.device)
    target = torch.empty_like(source)
    copy_seconds = best_of(lambda: target.copy_(source), workers, repeats=3 if setting.cpu else 10)
    tflops = 2 * n**3 / matmul_seconds / 1e12
    bandwidth = 2 * copy_bytes / copy_seconds / GIB
    del a, b, source, target
    setting.measured_tflops = tflops
    line = Line("ceilings", f"bf16 matmul {n} x {n} x {n}; a {size(copy_bytes / GIB)} copy on the device")
    line.figure = f"{tflops:,.1f} TFLOP/s bf16; {bandwidth:,.0f} GiB/s copied (read + write)"
    if setting.peak_tflops:
        line.figure += f"; the matmul at {tflops / setting.peak_tflops:.0%} of the {setting.peak_tflops:g} TFLOP/s datasheet peak"
    line.values.update(matmul_tflops=tflops, copy_gib_per_second=bandwidth)
    return line


def best_of(work, workers: Workers, repeats: int) -> float:
    """The fastest of `repeats` timed runs of `work` (after one untimed)."""
    work()
    synchronize(workers)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        synchronize(workers)
        best = min(best, time.perf_counter() - started)
    return best


def varlen_lines(setting: Setting, workers: Workers) -> list[Line]:
    """Variable-length SFT rows (the length spread of chat data, up to the line's sequence;
    an eos closing each turn inside the text, which is also the pad id; the model's config
    with a list of eos ids and no pad id), the same rows padded to the longest of each
    micro-batch and packed (data.packing); real tokens per second of each."""
    micro = 2 if setting.cpu else 16
    vocab = KNOWN_CONFIGS[setting.model_1b]["vocab_size"]
    steps, warmup = setting.timed_steps, setting.warmup_steps
    split = chat_split(micro * (steps + warmup), setting.sequence, vocab, seed=5)
    lengths = [len(row) for row in split.input_ids]
    real = sum(lengths)
    lines, rates = [], {}
    for packing in (False, True):
        name = f"sft_1b_varlen_{'packed' if packing else 'padded'}"
        trial = trial_config(setting.model_1b, setting, micro_batch=micro, sequence=setting.sequence,
                             checkpointing=False, packing=packing)
        measured = train_steps(trial, workers, steps, warmup, split=split)
        line = Line(name, f"LoRA SFT bf16 sdpa, 1B shape, micro-batch {micro} rows of {min(lengths)}-{max(lengths)} "
                          f"tokens ({real / len(lengths):.0f} on average), eos list, pad = the eos closing each turn, "
                          + ("packed (data.packing)" if packing else "padded to the longest of each micro-batch"))
        if measured.out_of_memory:
            line.figure = f"did not fit: {measured.out_of_memory}"
            lines.append(line)
            continue
        rates[packing] = measured.tokens / measured.seconds
        line.figure = f"{rates[packing]:,.0f} real tokens/s"
        line.values.update(tokens_per_second=rates[packing])
        memory_line(line, setting, trial, measured, [])
        lines.append(line)
    if len(rates) == 2:
        ratio = rates[True] / rates[False]
        lines[-1].figure += f"; {ratio:.2f}x padded"
        lines[-1].values["over_padded"] = ratio
        if not setting.cpu:
            lines[-1].verdict = "; ".join(filter(None, [
                f"{'meets' if ratio >= VARLEN_TARGET else 'below'} the {VARLEN_TARGET:g}x target", lines[-1].verdict]))
    return lines


def eval_and_checkpoint_lines(setting: Setting, workers: Workers) -> list[Line]:
    """One evaluation (sft.evaluate over an eval split of 8 micro-batches' rows, at twice
    the micro-batch as a trial evaluates) and one checkpoint save (the adapter, optimizer,
    schedule and random state as a trial's report writes them), each timed, after one
    training step of the 1B shape."""
    micro = 2 if setting.cpu else 16
    trial = trial_config(setting.model_1b, setting, micro_batch=micro, sequence=setting.sequence, checkpointing=False)
    vocab = KNOWN_CONFIGS[setting.model_1b]["vocab_size"]
    try:
        strategy = build_strategy(trial, workers)
        train = random_split(micro, setting.sequence, vocab, 0)
        strategy.model.train()
        sft.train_step([list(range(micro))], strategy, train, workers, trial.training, 1.0, 1)
        strategy.step()
        evaluation = random_split(8 * micro, setting.sequence, vocab, 1)
        synchronize(workers)
        reset_peak(workers)
        started = time.perf_counter()
        loss = sft.evaluate(strategy.model, evaluation, trial.training, workers, batch_size=2 * micro)
        eval_seconds = time.perf_counter() - started
        eval_memory = memory_state(workers)
        started = time.perf_counter()
        report_with_checkpoint(lambda metrics, checkpoint: None, {"step": 1}, strategy, workers)
        save_seconds = time.perf_counter() - started
        save_memory = memory_state(workers)
    finally:
        strategy = None
        free_memory()
    tokens = sum(len(row) for row in evaluation.input_ids)
    eval_line = Line("eval_1b", f"one evaluation, 1B shape, {len(evaluation)} rows x {setting.sequence} at batch "
                                f"{2 * micro} (inference_mode)")
    eval_line.figure = (f"{eval_seconds:.2f} s, {tokens / eval_seconds:,.0f} tokens/s (loss {loss:.2f})"
                        + memory_text(eval_memory))
    eval_line.values.update(seconds=eval_seconds, tokens_per_second=tokens / eval_seconds, memory=eval_memory)
    save_line = Line("checkpoint_1b", "one checkpoint save, 1B shape, LoRA r=16 on every projection (adapter, "
                                      "optimizer, schedule, random state)")
    save_line.figure = f"{save_seconds:.2f} s" + memory_text(save_memory)
    save_line.values.update(seconds=save_seconds, memory=save_memory)
    return [eval_line, save_line]


def qlora_line(setting: Setting, workers: Workers) -> Line:
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return Line("qlora_8b", "QLoRA nf4, 8B shape, gradient checkpointing",
                    skipped="bitsandbytes is not installed (its wheel, 41 MiB, did not travel)")
    if setting.cpu:
        return Line("qlora_8b", "QLoRA nf4, 8B shape, gradient checkpointing",
                    skipped="bitsandbytes' 4-bit kernels are for GPUs; on a CPU the check runs no QLoRA")
    return sft_line(setting, workers, "qlora_8b", "8B", checkpointing=True, quantization="nf4")


def dpo_line(setting: Setting, workers: Workers) -> Line:
    micro = 2 if setting.cpu else 4
    trial = trial_config(setting.model_1b, setting, micro_batch=micro, sequence=setting.sequence,
                         checkpointing=False, task="dpo")
    measured = train_steps(trial, workers, steps=1, warmup=1)
    line = Line("dpo_1b", f"DPO one step (our loop, trainables/dpo.py; trl not needed), 1B shape, "
                          f"{micro} pairs x {setting.sequence}")
    if measured.out_of_memory:
        line.figure = f"did not fit: {measured.out_of_memory}"
        return line
    line.figure = f"{measured.tokens / measured.seconds:,.0f} tokens/s"
    memory_line(line, setting, trial, measured, [])
    return line


def oom_lines(setting: Setting, workers: Workers) -> list[Line]:
    """A micro-batch that cannot fit and whose half can (by the forecast), and a sequence
    so long that micro-batch 1 cannot fit: what out-of-memory handling does with each. On
    a CPU, where nothing runs out, the `oom` chaos fault stands in (the same handling)."""
    chaos = "oom" if setting.cpu else "none"
    if setting.cpu:
        halving_micro, long_sequence = 4, setting.sequence
    else:
        halving_micro = 1
        while forecast_trial_memory(trial_config(setting.model_1b, setting, micro_batch=halving_micro,
                                                 sequence=setting.sequence, checkpointing=False),
                                    lora_r=16).needs_gib() < 1.3 * setting.card_gib:
            halving_micro *= 2
        long_sequence = 131072
    lines = []
    for name, micro, sequence in (("oom_halved", halving_micro, setting.sequence), ("oom_at_1", 1, long_sequence)):
        trial = trial_config(setting.model_1b, setting, micro_batch=micro, sequence=sequence, checkpointing=False,
                             chaos=chaos)
        estimate = forecast_trial_memory(trial, lora_r=16)
        measured = train_steps(trial, workers, steps=1, warmup=0)
        line = Line(name, f"out of memory for real: 1B shape, micro-batch {micro} x {sequence}, no checkpointing"
                          + (" (injected: chaos.fault oom, a CPU has no memory limit to reach)" if setting.cpu else ""))
        line.forecast = size(estimate.gib) + (
            f", needs {estimate.needs_gib():.1f} GiB of {setting.card_gib:.1f}" if setting.card_gib else "")
        if measured.out_of_memory:
            line.figure = f"trial fails: {measured.out_of_memory}"
        elif measured.micro_batch != micro:
            line.figure = f"went on at micro-batch {measured.micro_batch} after running out at {micro}"
        else:
            line.figure = f"it fit at micro-batch {micro} (peak {size(measured.peak_gib or 0)}): nothing ran out"
        line.values.update(micro_batch=measured.micro_batch, failed=bool(measured.out_of_memory))
        lines.append(line)
    return lines


def packing_lines(setting: Setting, out: Path) -> list[Line]:
    """One 1B trial alone, then PACKING_COPIES side by side on the same GPU (separate
    processes, as packed trials are), each at micro-batch 1 x packing_sequence."""
    import importlib.util

    ray_line = Line("packing_ray", f"{PACKING_COPIES} one-worker trials at gpus_per_worker 0.25 through Ray Tune")
    if importlib.util.find_spec("ray") is None:
        ray_line.skipped = ("ray is not installed (its wheel is 75.6 MiB, over the 64 MiB a command carries, and "
                            "Tune needs more besides); the next line packs plain processes instead")
    else:
        ray_line.skipped = "ray is installed, but this check packs plain processes only; run a sweep to see Tune's packing"
    alone = run_side_by_side(setting, out, copies=1)
    packed = run_side_by_side(setting, out, copies=PACKING_COPIES)
    line = Line("packing_1b", f"{PACKING_COPIES} processes sharing the {'CPU' if setting.cpu else 'GPU'}, 1B shape, "
                              f"micro-batch 1 x {setting.packing_sequence}, against one alone")
    if not alone or len(packed) != PACKING_COPIES:
        line.figure = f"a copy did not report (alone: {len(alone)}, packed: {len(packed)} of {PACKING_COPIES})"
        return [line, ray_line]
    alone_rate = alone[0]["tokens"] / alone[0]["seconds"]
    rates = [copy["tokens"] / copy["seconds"] for copy in packed]
    ratio = sum(rates) / alone_rate
    line.figure = (f"total {sum(rates):,.0f} tokens/s = {ratio:.2f}x one alone ({alone_rate:,.0f}); each "
                   + ", ".join(f"{rate:,.0f}" for rate in rates))
    peaks = [copy["peak_gib"] for copy in packed if copy["peak_gib"] is not None]
    if peaks:
        line.figure += f"; peak {max(peaks):.1f} GiB per copy"
    if not setting.cpu:  # on a CPU the copies share its cores: the target is for a GPU
        line.verdict = f"{'meets' if ratio >= PACKING_TARGET else 'below'} the {PACKING_TARGET:g}x target"
    line.values.update(alone_tokens_per_second=alone_rate, tokens_per_second=rates, ratio=ratio)
    return [line, ray_line]


def run_side_by_side(setting: Setting, out: Path, copies: int) -> list[dict]:
    """`copies` processes, each training one trial (`packing_copy`), released together once
    all have warmed up; what each reported. New processes on a GPU (CUDA cannot be used in
    a child forked after it started); forked on a CPU, which spares each the imports."""
    import multiprocessing

    folder = Path(tempfile.mkdtemp(prefix="gpu-check-packing-", dir=out))
    go = folder / "go"
    context = multiprocessing.get_context("fork" if setting.cpu else "spawn")
    processes = [
        context.Process(target=packing_copy, args=(str(folder), copy, setting.cpu, setting.packing_sequence,
                                                   setting.packing_seconds))
        for copy in range(copies)
    ]
    for process in processes:
        process.start()
    deadline = time.time() + 120
    while time.time() < deadline and not all((folder / f"ready-{copy}").exists() for copy in range(copies)):
        if any(process.exitcode not in (None, 0) for process in processes):
            break
        time.sleep(0.1)
    go.touch()
    results = []
    for copy, process in enumerate(processes):
        process.join(timeout=setting.packing_seconds + 60)
        if process.is_alive():
            process.kill()
            process.join()
        result = folder / f"result-{copy}.json"
        if result.exists():
            results.append(json.loads(result.read_text()))
    for leftover in folder.iterdir():
        leftover.unlink()
    folder.rmdir()
    return results


def packing_copy(folder: str, copy: int, cpu: bool, sequence: int, seconds: float) -> None:
    """One packed trial: the 1B shape at micro-batch 1, warmed up, then trained for
    `seconds` once the go file appears in `folder`; its tokens, seconds and peak memory
    into folder/result-<copy>.json."""
    folder_path = Path(folder)
    device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
    workers = Workers(0, 1, device)
    if cpu:
        torch.set_num_threads(1)
    model = BUILTIN_TINY_MODEL if cpu else MODEL_1B
    trial = trial_config(model, _Where(cpu), micro_batch=1, sequence=sequence, checkpointing=False)
    strategy = build_strategy(trial, workers)
    split = random_split(64, sequence, KNOWN_CONFIGS[model]["vocab_size"], copy)
    batches = endless_batches(len(split), 1, workers, seed=copy)

    def step() -> int:
        _, tokens = sft.train_step([next(batches)], strategy, split, workers, trial.training, 1.0, 1)
        strategy.step()
        return tokens

    for _ in range(3):
        step()
    synchronize(workers)
    (folder_path / f"ready-{copy}").touch()
    while not (folder_path / "go").exists():
        time.sleep(0.02)
    tokens, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        tokens += step()
    synchronize(workers)
    result = {"tokens": tokens, "seconds": time.perf_counter() - started, "peak_gib": peak_gib(workers)}
    (folder_path / f"result-{copy}.json").write_text(json.dumps(result))


@dataclass
class _Where:
    """What trial_config reads of a Setting, in a packed copy."""

    cpu: bool


# ---------------------------------------------------------------- device helpers


def size(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"


def count(parameters: int) -> str:
    return f"{parameters / 1e9:.2f}B" if parameters >= 1e8 else f"{parameters / 1e6:.2f}M"


def synchronize(workers: Workers) -> None:
    if workers.device.type == "cuda":
        torch.cuda.synchronize(workers.device)


def reset_peak(workers: Workers) -> None:
    if workers.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(workers.device)


def peak_gib(workers: Workers) -> float | None:
    return torch.cuda.max_memory_allocated(workers.device) / GIB if workers.device.type == "cuda" else None


def memory_state(workers: Workers) -> dict:
    """The allocator's peaks since the last reset and the device memory in use now (every
    process's, as the driver counts it); empty on a CPU."""
    if workers.device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(workers.device)
    return {
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated(workers.device) / GIB,
        "max_memory_reserved_gib": torch.cuda.max_memory_reserved(workers.device) / GIB,
        "device_in_use_gib": (total - free) / GIB,
    }


def memory_text(memory: dict) -> str:
    if not memory:
        return "; peak memory n/a (CPU: no allocator peak)"
    return (f"; peak {size(memory['max_memory_allocated_gib'])} allocated, {size(memory['max_memory_reserved_gib'])} "
            f"reserved, {size(memory['device_in_use_gib'])} of the device in use")


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_tflops_of(device: torch.device) -> tuple[str, float | None]:
    """The device's name and its dense bf16 peak from PEAK_TFLOPS (None for a GPU the table
    lacks); a CPU counts its threads at the table's per-core figure."""
    if device.type == "cpu":
        return f"CPU ({torch.get_num_threads()} threads)", PEAK_TFLOPS["cpu"][0] * torch.get_num_threads()
    name = torch.cuda.get_device_name(device)
    memory_gib = torch.cuda.get_device_properties(device).total_memory / GIB
    lowered = name.lower().replace(" ", "")
    for key in ("h200", "h100", "l40s", "a10g", "rtx4090"):
        if key.removeprefix("rtx") in lowered:
            return name, PEAK_TFLOPS[key][0]
    if "a100" in lowered:
        return name, PEAK_TFLOPS["a100-80gb" if memory_gib > 50 else "a100-40gb"][0]
    return name, None


def make_setting(args: argparse.Namespace) -> Setting:
    device = torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
    _, peak = peak_tflops_of(device)
    card = None if args.cpu else torch.cuda.get_device_properties(device).total_memory / GIB
    tiny = BUILTIN_TINY_MODEL
    return Setting(
        device=device,
        model_1b=tiny if args.cpu else MODEL_1B,
        model_8b=tiny if args.cpu else MODEL_8B,
        sequence=args.sequence or (64 if args.cpu else 1024),
        timed_steps=2 if args.cpu else 6,
        warmup_steps=1 if args.cpu else 2,
        packing_sequence=args.sequence or (64 if args.cpu else 512),
        packing_seconds=args.seconds or (1.5 if args.cpu else 12.0),
        card_gib=card,
        peak_tflops=peak,
        deadline=time.time() + args.budget_s,
    )


# ---------------------------------------------------------------- the check


# Each line, in the order they run (the ceilings first, the likeliest to be wanted next,
# QLoRA's slow load last). `packing` (processes sharing the GPU) and `oom` (running out of
# memory for real) run only when named in --lines: neither depends on the card.
LINES = ("ceilings", "sft_1b", "sft_1b_checkpointing", "sft_8b_checkpointing", "varlen", "dpo_1b",
         "eval_checkpoint", "qlora_8b", "sft_1b_compiled")
ON_REQUEST = ("packing", "oom")
# About what a line takes on an H100, to skip it rather than overrun the check's budget.
LINE_SECONDS = {"ceilings": 10, "sft_1b": 20, "sft_1b_checkpointing": 20, "sft_8b_checkpointing": 40, "varlen": 30,
                "dpo_1b": 15, "eval_checkpoint": 20, "packing": 70, "oom": 25, "qlora_8b": 90,
                "sft_1b_compiled": 90}


def run_check(args: argparse.Namespace) -> list[Line]:
    """The chosen lines in order, the table and gpu_check.jsonl written after each."""
    setting = make_setting(args)
    workers = Workers(0, 1, setting.device)
    runs = {
        "ceilings": lambda: [ceiling_line(setting, workers)],
        "sft_1b": lambda: [sft_line(setting, workers, "sft_1b", "1B", checkpointing=False)],
        "sft_1b_checkpointing": lambda: [sft_line(setting, workers, "sft_1b_checkpointing", "1B", checkpointing=True)],
        "sft_8b_checkpointing": lambda: [sft_line(setting, workers, "sft_8b_checkpointing", "8B", checkpointing=True)],
        "varlen": lambda: varlen_lines(setting, workers),
        "dpo_1b": lambda: [dpo_line(setting, workers)],
        "eval_checkpoint": lambda: eval_and_checkpoint_lines(setting, workers),
        "packing": lambda: packing_lines(setting, Path(args.out)),
        "oom": lambda: oom_lines(setting, workers),
        "qlora_8b": lambda: [qlora_line(setting, workers)],
        "sft_1b_compiled": lambda: [sft_line(setting, workers, "sft_1b_compiled", "1B", checkpointing=False,
                                             compiled=True)],
    }
    chosen = args.lines.split(",") if args.lines else LINES
    out, started_check = Path(args.out), time.time()
    lines: list[Line] = []
    for name in LINES + ON_REQUEST:
        if name not in chosen:
            continue
        if not setting.cpu and setting.time_left() < LINE_SECONDS[name]:
            new = [Line(name, "", skipped=f"the check's {args.budget_s:g} s budget is nearly spent")]
        else:
            started = time.time()
            reset_peak(workers)
            try:
                new = runs[name]()
            except Exception as error:  # noqa: BLE001 - a line that breaks is reported, the others still run
                new = [Line(name, "", skipped=f"it raised {type(error).__name__}: {str(error).splitlines()[0][:300]}")]
            free_memory()
            for line in new:  # the peaks over the whole line where it recorded none of its own
                line.values.setdefault("memory", memory_state(workers))
                line.values["seconds_of_line"] = time.time() - started
            print(f"[gpu_check] {name}: {time.time() - started:.1f} s", flush=True)
        lines += new
        with (out / "gpu_check.jsonl").open("a") as file:
            for line in new:
                file.write(json.dumps(asdict(line)) + "\n")
        write_table(lines, out, args, time.time() - started_check)
    return lines


def write_table(lines: list[Line], out: Path, args: argparse.Namespace, seconds: float) -> str:
    import importlib.metadata as metadata

    device = torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
    name, peak = peak_tflops_of(device)
    versions = {}
    for package in ("torch", "transformers", "peft", "accelerate", "pydantic", "bitsandbytes"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    header = [
        f"# GPU check on {name}{' (--cpu: tiny shape for every line)' if args.cpu else ''}",
        "",
        f"bf16 dense peak {peak:g} TFLOP/s (sweeper/cost/_throughput.py)" if peak else "bf16 peak: not in the table",
        "; ".join(f"{k} {v}" for k, v in versions.items()) + f"; {seconds:.0f} s",
        "",
        "| line | what | figure | forecast | against target |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = ["| " + " | ".join(cell.replace("|", "/") for cell in line.cells()) + " |" for line in lines]
    table = "\n".join(header + rows) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.md").write_text(table)
    document = {"device": name, "peak_tflops": peak, "versions": versions, "seconds": seconds, "cpu": args.cpu,
                "lines": [asdict(line) for line in lines]}
    (out / "gpu_check.json").write_text(json.dumps(document, indent=2))
    return table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("out", help="folder the table is written to (gpu_check.md, gpu_check.json)")
    parser.add_argument("--cpu", action="store_true", help="a tiny shape on the CPU: the same code, in seconds")
    parser.add_argument("--lines", default="", help=f"comma-separated subset of: {', '.join(LINES)}")
    parser.add_argument("--budget-s", type=float, default=270.0, help="lines that would end past this are skipped")
    parser.add_argument("--sequence", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --cpu for the tiny shape on the CPU", file=sys.stderr)
        return 2
    started = time.time()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_check.jsonl").unlink(missing_ok=True)
    lines = run_check(args)
    print(write_table(lines, Path(args.out), args, time.time() - started), end="")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
