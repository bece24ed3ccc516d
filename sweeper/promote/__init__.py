"""After a sweep: the best trial (or one named) registered in the MLflow Model Registry
(`registry`), or written as a YAML that trains it as one full run (`export`)."""

__all__ = ["registry", "export"]
