"""What a trial costs: accelerator prices and the one accelerators x hours x price rule
(`sweep_rate`, `sweep_cost`), the model's architecture read once (for
parameters, FLOPs and bytes), the throughput model (`modelled_timing`), the GPU memory
forecast and the sweep folder's disk need. Pure Python: no Ray or torch.

The private modules: `_prices` (price lookup, trial and sweep cost), `_architecture` (a
model's shape from its config: built-in, known, local or cached), `_throughput` (modelled
step time where nothing was measured), `_memory` (a trial's GPU memory against the card's),
`_disk` (what a sweep writes against what its folder's disk has free).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "PRICE_TABLE", "Rate", "SweepCost", "TrialCost", "priced_on_cluster", "pruning_saving", "sweep_cost",
    "sweep_rate", "Architecture", "KNOWN_CONFIGS", "TrialTiming", "modelled_timing", "PEAK_TFLOPS",
    "RAY_TRIAL_START_SECONDS", "REUSED_TRIAL_START_SECONDS", "GPU_MEMORY_GIB", "check_before_launch", "cluster_accelerator_types",
    "forecast_trial_memory", "gpu_memory_gib", "launch_card_gib", "trial_forecast_gib", "unfit_problems",
    "with_gpu_packing", "check_room_for",
    "architecture_of",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "PRICE_TABLE": "_prices", "Rate": "_prices", "SweepCost": "_prices", "TrialCost": "_prices",
    "priced_on_cluster": "_prices", "pruning_saving": "_prices", "sweep_cost": "_prices",
    "sweep_rate": "_prices",
    "Architecture": "_architecture", "KNOWN_CONFIGS": "_architecture",
    "TrialTiming": "_throughput", "modelled_timing": "_throughput", "PEAK_TFLOPS": "_throughput",
    "RAY_TRIAL_START_SECONDS": "_throughput", "REUSED_TRIAL_START_SECONDS": "_throughput",
    "GPU_MEMORY_GIB": "_memory", "check_before_launch": "_memory", "cluster_accelerator_types": "_memory",
    "forecast_trial_memory": "_memory", "gpu_memory_gib": "_memory", "launch_card_gib": "_memory",
    "trial_forecast_gib": "_memory", "unfit_problems": "_memory", "with_gpu_packing": "_memory",
    "check_room_for": "_disk",
    "architecture_of": "_architecture",
}

__getattr__ = lazy_getattr(__name__, _HOME)
