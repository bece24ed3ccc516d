"""What a sweep records and how it is read back: the in-memory book of trials, the one
MLflow writer (`tracker`), the MLflow connection, the read side (`store`, over the two
run readers), the live terminal table and the closing summary. The read side loads
neither Ray nor torch: `sweep list`, `status` and `report` use only it.

- `book`: `SweepBook` and `TrialRecord`, filled by the driver;
- `tracker`: `MlflowTracker`, every MLflow write of a sweep;
- `mlflow_store`: tracking URI, client and experiment;
- `mlflow_adapter`: the private MLflow names, and only those;
- `store` and `run_reader`: sweeps and trials read back as polars frames;
- `console` and `summary`: the live table and the summary printed at the end.
"""

__all__ = ["book", "tracker", "mlflow_store", "mlflow_adapter", "store", "run_reader", "console", "summary"]
