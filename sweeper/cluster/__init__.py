"""The Ray cluster and the storage a sweep runs on: connecting (address, auth), the
warm-start fork server, Ray Jobs, checkpoint storage (local or S3), and every private
Ray name we use, in one adapter.

- `connect`: which cluster, its auth, `start_ray`, the trial processes' Ray settings;
- `fork_server`: the warm-start server every worker of a CPU sweep on one machine forks from;
- `jobs`: `sweep submit`, `sweep logs`, a stop or resume as a Ray Job;
- `storage`: checkpoint and Tune-state storage (a folder or an S3 URI);
- `ray_adapter`: the private Ray names, and only those.
"""

__all__ = ["connect", "fork_server", "jobs", "storage", "ray_adapter"]
