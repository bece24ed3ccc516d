"""What a sweep writes to its folder, against what its file system has free: checked before
a sweep starts, so that a sweep that cannot fit is refused with one line instead of
filling the disk halfway through.

At any moment the folder holds: each running trial's latest checkpoint and the one being
written (Train keeps one per trial), the adapters of the best `search.keep_best_adapters`
finished trials, the Optuna study and Tune's state (each trial's results). A checkpoint
is the adapter (fp32), its AdamW moments (two fp32 figures a parameter) and the step's
schedule and random state."""

from __future__ import annotations

from pathlib import Path

from sweeper.cost._architecture import architecture_of
from sweeper.cost._memory import largest_rank
from sweeper.errors import UserError

# An adapter parameter in a checkpoint: its fp32 weight and AdamW's two fp32 moments.
CHECKPOINT_BYTES_PER_PARAM = 12
# The study, Tune's experiment state and each trial's results and logs (tens of KiB a
# trial), with room to spare.
STATE_BYTES = 8 * 1024 * 1024
TRIAL_STATE_BYTES = 256 * 1024
TRIALS_WITHOUT_A_COUNT = 100  # a budget-driven sweep (no search.num_trials)


def adapter_params(spec) -> int | None:
    """LoRA parameters of the sweep's largest trial, or None where the model's config
    cannot be read here."""
    arch = architecture_of(spec.model.name_or_path, from_hub=False)
    if arch is None:
        return None
    shapes = arch.linear_shapes()
    rank = largest_rank(spec)
    return arch.layers * sum(rank * (a + b) for name, (a, b) in shapes.items() if name in spec.lora.target_modules)


def sweep_disk_need(spec, concurrent_trials: int) -> tuple[int, int] | None:
    """(bytes the sweep's folder holds at most, checkpoints among them), or None where
    the adapter's size is unknown."""
    params = adapter_params(spec)
    if params is None:
        return None
    checkpoints = 2 * concurrent_trials + spec.search.keep_best_adapters
    trials = spec.search.num_trials or TRIALS_WITHOUT_A_COUNT
    return checkpoints * params * CHECKPOINT_BYTES_PER_PARAM + STATE_BYTES + trials * TRIAL_STATE_BYTES, checkpoints


def check_room_for(spec, concurrent_trials: int) -> None:
    """Refuse a sweep whose folder's file system has less free than the sweep will write.

    Raises:
        UserError: keyed by output_dir, with what is free, what the sweep needs and what to do.
    """
    from sweeper.cluster import storage

    if storage.is_remote(spec.storage_uri):
        return
    need = sweep_disk_need(spec, concurrent_trials)
    if need is None:
        return
    needed, checkpoints = need
    folder = Path(spec.sweep_dir)
    free = storage.free_bytes(folder)
    if free < needed:
        raise UserError(
            f"output_dir: {storage.existing_folder(folder)} has {storage.size_text(free)} free, and the sweep writes "
            f"up to {storage.size_text(needed)} ({checkpoints} checkpoints at once, the Optuna study, Tune's state); "
            "free space there, choose another output_dir, or lower search.keep_best_adapters"
        )
