"""`sweep init`: a first sweep file for a model and a data file, written as commented YAML:
the search space from published guidance (each range with its source), `data.max_length`,
the batch and `training.max_steps` from the data read with the model's tokenizer, and with
a GPU named the micro-batch, checkpointing and quantization the memory forecast fits on it.
The file is validated as `sweep validate` would before it is written.

Its interface is `scaffold_sweep` and `write_sweep_file`; the private modules: `_arguments`
(the arguments checked, the model and data read), `_sizing`, `_writer` (the file).
"""

from sweeper._lazy import lazy_getattr

__all__ = ["scaffold_sweep", "write_sweep_file"]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {"scaffold_sweep": "_writer", "write_sweep_file": "_writer"}

__getattr__ = lazy_getattr(__name__, _HOME)
