"""`sweep init`: a first sweep file for a model and a data file, written as commented YAML.

The search space comes from published guidance, each range with its source in a comment;
the sizes come from the data and the card:

- `data.max_length` from the examples' token lengths, read with the model's tokenizer the
  way a trial reads them (`trainables.data`);
- the batch (16 sequences a step) and `training.max_steps` (one epoch, at least 4 steps an
  evaluation over 27 evaluations, at most `MAX_STEPS`) from the number of examples;
- with a GPU named, the micro-batch, gradient checkpointing and 4-bit quantization from
  the memory forecast (`sweeper.cost._memory`) for that card.

The file is validated as the `sweep validate` command would before it is written; the
model and the data are refused with one keyed line when they cannot be read.

Its interface is `scaffold_sweep` and `write_sweep_file`; the private modules:
`_arguments` (the arguments checked, the model and data read, the data's profile),
`_sizing` (max_length, the schedule and the fit on the GPU named) and `_writer` (the
commented file, checked before it is written).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "scaffold_sweep", "write_sweep_file",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "scaffold_sweep": "_writer", "write_sweep_file": "_writer",
}

__getattr__ = lazy_getattr(__name__, _HOME)
