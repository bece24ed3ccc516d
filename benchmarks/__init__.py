"""Benchmarks of per-trial overhead, in-trial throughput and pruning accounting (see README.md)."""
