"""A process's random states, kept and put back around what must not move them: a step-0
evaluation that samples completions (trainables/hf_reporting.py), a one-worker trial in a
process Tune reuses for the next trial (sweeper/run/_trial.py)."""

from __future__ import annotations

import random

__all__ = ["process_random_states", "set_process_random_states"]


def process_random_states() -> tuple:
    """Python's, numpy's and torch's random states in this process (every CUDA device's
    where CUDA is in use), for `set_process_random_states` to put back."""
    import numpy
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return random.getstate(), numpy.random.get_state(), torch.get_rng_state(), cuda


def set_process_random_states(states: tuple) -> None:
    """Put back what `process_random_states` returned."""
    import numpy
    import torch

    python, numpy_state, torch_state, cuda = states
    random.setstate(python)
    numpy.random.set_state(numpy_state)
    torch.set_rng_state(torch_state)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
