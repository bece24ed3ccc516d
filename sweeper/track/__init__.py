"""What a sweep records and how it is read back: the in-memory book of trials
(`SweepBook`, `TrialRecord`), the one MLflow writer (`MlflowTracker`), the MLflow
connection (`resolve_tracking_uri`, `client_for`, ...), the read side (`SweepStore`), the
live terminal table (`LiveTable`), the closing summary (`print_summary`) and how the sweep
ended (`how_it_ended`). The read side
loads neither Ray nor torch: `sweep list`, `status` and `report` use only it.

The private modules: `_book`; `_tracker` (every MLflow write of a sweep) and `_backlog`
(its writes held while the tracking server is away); `_mlflow_store` (tracking URI, client,
experiment, what a parent run records of its config and machine); `_store` (sweeps and trials read back as polars
frames); `_console` and `_summary`.
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "SweepBook", "TrialRecord", "MlflowTracker", "LiveTable", "print_summary", "how_it_ended", "SweepStore", "SweepRecord",
    "best_trial_row", "check_tracking_uri", "check_tracking_writable", "client_for", "ensure_experiment",
    "hardware_description", "resolve_tracking_uri",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "SweepBook": "_book", "TrialRecord": "_book",
    "MlflowTracker": "_tracker",
    "LiveTable": "_console",
    "print_summary": "_summary", "how_it_ended": "_summary",
    "SweepStore": "_store", "SweepRecord": "_store", "best_trial_row": "_store",
    "check_tracking_uri": "_mlflow_store", "check_tracking_writable": "_mlflow_store",
    "client_for": "_mlflow_store", "ensure_experiment": "_mlflow_store",
    "hardware_description": "_mlflow_store", "resolve_tracking_uri": "_mlflow_store",
}

__getattr__ = lazy_getattr(__name__, _HOME)
