"""The Ray cluster and the storage a sweep runs on: connecting (address, auth), Ray Jobs,
checkpoint storage (local or S3), and every private Ray name we use, in one adapter.

- `connect`: which cluster, its auth, `start_ray`, the trial processes' Ray settings;
- `jobs`: `sweep submit`, `sweep logs`, a stop or resume as a Ray Job;
- `storage`: checkpoint and Tune-state storage (a folder or an S3 URI);
- `ray_adapter`: the private Ray names, and only those.
"""

__all__ = ["connect", "jobs", "storage", "ray_adapter"]
