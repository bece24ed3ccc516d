"""Padded vs packed (`data.packing`) vs length-grouped (`data.group_by_length`) SFT micro-
batches on the CPU: real tokens (padding left out) per CPU-second of the trial's own step
(`trainables.sft.train_step` through the trial's strategy, LoRA on a Llama built from a
config), on generated rows with the length spread of chat SFT data (32 to 1024 tokens,
log-normal around 256, as conversations of chat SFT sets spread).

Paired: each repeat times the same optimizer steps (the same rows) padded, packed into rows
no longer than the longest (sdpa's layout) and packed into one row (flash_attention_2's),
in alternating order; grouping by length takes the same examples in its own micro-batches.
The table gives the median over repeats and the spread (lowest and highest) of each
figure and of packed / padded.

    python -m benchmarks.packing --repeats 5 --steps 3 --hidden 384
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path

SHORTEST, LONGEST, MEDIAN = 32, 1024, 256


def chat_lengths(count: int, seed: int) -> list[int]:
    """Row lengths of a chat SFT set: log-normal around MEDIAN, cut to SHORTEST-LONGEST."""
    rng = random.Random(seed)
    return [min(LONGEST, max(SHORTEST, round(rng.lognormvariate(math.log(MEDIAN), 0.8)))) for _ in range(count)]


def generated_split(lengths: list[int], vocab: int, seed: int):
    """Random token rows; the loss on the second half of each (the "answer")."""
    from trainables.data import IGNORE_INDEX, TokenizedSplit

    rng = random.Random(seed)
    ids = [[rng.randrange(1, vocab) for _ in range(length)] for length in lengths]
    labels = [[IGNORE_INDEX] * (len(row) // 2) + row[len(row) // 2 :] for row in ids]
    return TokenizedSplit(ids, labels, pad_id=0)


def build_model(folder: Path, hidden: int, layers: int, vocab: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32, max_position_embeddings=LONGEST,
        tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=[1, 2],
    )
    from trainables.tiny import build_tokenizer

    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)  # the sweep's model folder needs one; the rows are generated ids
    return str(folder)


def timed(step_batches, strategy, split, workers, training, packing: str | None) -> tuple[int, float]:
    """Real tokens and CPU-seconds of the given optimizer steps."""
    from trainables import sft

    tokens, started = 0, time.process_time()
    for number, batches in enumerate(step_batches, start=1):
        _, step_tokens = sft.train_step(batches, strategy, split, workers, training, 1.0, number, packing)
        strategy.step()
        tokens += step_tokens
    return tokens, time.process_time() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps timed per mode and repeat")
    parser.add_argument("--batch", type=int, default=8, help="examples per micro-batch")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    import torch

    # Here, not above: benchmarks/gpu_check.py takes chat_lengths from this module on a
    # machine without what benchmarks.common imports (rich).
    from benchmarks.common import bench_spec
    from trainables.common import ONE_ROW, PACKED_ROWS, Workers, endless_batches, seed_everything
    from trainables.strategies import prepare

    torch.set_num_threads(args.threads)
    workers = Workers(0, 1, torch.device("cpu"))
    folder = Path(tempfile.mkdtemp(prefix="sweeper-bench-packing-"))
    source = build_model(folder / "model", args.hidden, args.layers, args.vocab)
    per_repeat = args.steps * args.batch
    lengths = chat_lengths(per_repeat * args.repeats, seed=0)
    split = generated_split(lengths, args.vocab, seed=1)
    spec = bench_spec(
        "packing", folder / "out", model={"name_or_path": source}, data={"max_length": LONGEST},
        training={"per_device_batch_size": args.batch, "max_steps": args.steps * args.repeats * 3 + 2, "eval_every": 1},
        early_stopping={"scheduler": "none"},
    )
    trial = spec.trial_config()
    seed_everything(0)
    strategy = prepare(trial, source, workers)
    strategy.model.train()
    # one step each way first: allocator and kernels warm
    for layout in (None, PACKED_ROWS, ONE_ROW):
        timed([[list(range(args.batch))]], strategy, split, workers, trial.training, layout)

    rates: dict[str, list[float]] = {"padded": [], "packed": [], "packed_one_row": [], "grouped": []}
    ratios: list[float] = []
    padding_share: list[float] = []
    for repeat in range(args.repeats):
        indices = list(range(repeat * per_repeat, (repeat + 1) * per_repeat))
        steps = [[indices[s * args.batch : (s + 1) * args.batch]] for s in range(args.steps)]
        grouped_order = endless_batches(
            per_repeat, args.batch, workers, seed=repeat, lengths=[lengths[i] for i in indices]
        )
        grouped = [[[indices[i] for i in next(grouped_order)]] for _ in range(args.steps)]
        modes = [("padded", steps, None), ("packed", steps, PACKED_ROWS), ("packed_one_row", steps, ONE_ROW)]
        figures = {}
        for name, batches, packing in (modes if repeat % 2 == 0 else modes[::-1]) + [("grouped", grouped, None)]:
            tokens, cpu_seconds = timed(batches, strategy, split, workers, trial.training, packing)
            figures[name] = tokens / cpu_seconds
            rates[name].append(figures[name])
        ratios.append(figures["packed"] / figures["padded"])
        padded_tokens = sum(len(b) * max(lengths[i] for i in b) for [b] in steps)
        padding_share.append(1 - sum(lengths[i] for i in indices) / padded_tokens)
        print(
            f"repeat {repeat + 1}: padded {figures['padded']:,.0f}, packed {figures['packed']:,.0f}, one row "
            f"{figures['packed_one_row']:,.0f}, grouped {figures['grouped']:,.0f} real tokens per CPU-second; "
            f"packed/padded {ratios[-1]:.2f}x",
            flush=True,
        )

    def spread(values: list[float], digits: int = 0) -> str:
        return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"

    print(
        f"\nrows: {len(lengths)} generated, lengths {min(lengths)}-{max(lengths)} (median {statistics.median(lengths):.0f}); "
        f"micro-batch {args.batch}; Llama {args.layers} layers x {args.hidden}, vocab {args.vocab}, LoRA r={trial.lora.r}; "
        f"{args.threads} thread(s); padding share of the padded micro-batches {spread(padding_share, 2)}"
    )
    print("| mode | real tokens per CPU-second, median (lowest-highest) over repeats |")
    print("| --- | --- |")
    for name in rates:
        print(f"| {name} | {spread(rates[name])} |")
    print(f"| packed / padded (paired, same rows) | {spread(ratios, 2)} x |")
    result = {"rates": rates, "packed_over_padded": ratios, "padding_share": padding_share, "args": vars(args) | {"json": None}}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
