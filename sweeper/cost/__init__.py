"""What a trial costs: accelerator prices and the one accelerators x hours x price rule,
the model's architecture read once (for parameters, FLOPs and bytes), the throughput
model and the GPU memory forecast. Pure Python: no Ray or torch.

- `prices`: price table, `price_per_hour`, `trial_cost`, `sweep_cost`;
- `architecture`: a model's shape from its config (built-in, known, local or cached);
- `throughput`: modelled step time and a trial's least cost, where nothing was measured;
- `memory`: a trial's GPU memory against the card's.
"""

__all__ = ["prices", "architecture", "throughput", "memory"]
