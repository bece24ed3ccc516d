"""Confirmed winners (search.confirm): after the search, its best configs train again to
max_steps with new seeds, and the winner is the config with the best mean. `confirm_best`
runs the reruns (the launch calls it once the search's Tune run has ended); `confirm`
decides from values alone; `from_book` and `from_trials` read a sweep's confirmation from
the driver's book or the store's trial frame; `confirmation_table`, `confirmation_frame`
and `confirmation_lines` show it (`sweep status`, the summary, the report).

The private modules: `_select` (pure: the top configs, the seeds, mean and 95% t-interval,
the winner), `_table` (read and shown; no Ray), `_phase` (the second Tune run).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "CONFIRMS_ATTR", "SEED_PATH", "Candidate", "Rerun", "Confirmed", "Confirmation", "confirm", "top_configs",
    "new_seeds", "mean_interval", "t_quantile", "confirm_best", "from_book", "from_trials", "reruns_to_run", "confirmation_table",
    "confirmation_frame", "confirmation_lines",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "SEED_PATH": "_select", "Candidate": "_select", "Rerun": "_select", "Confirmed": "_select",
    "Confirmation": "_select", "confirm": "_select", "top_configs": "_select", "new_seeds": "_select",
    "mean_interval": "_select", "t_quantile": "_select",
    "CONFIRMS_ATTR": "_phase", "confirm_best": "_phase",
    "from_book": "_table", "from_trials": "_table", "reruns_to_run": "_table", "confirmation_table": "_table", "confirmation_frame": "_table",
    "confirmation_lines": "_table",
}

__getattr__ = lazy_getattr(__name__, _HOME)
