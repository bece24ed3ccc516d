"""The Ray cluster and the storage a sweep runs on: which cluster, its auth and
`start_ray` (`cluster_address`, `check_address`, `start_ray`, `stop_local_cluster`, ...);
what a placement group holds and waits on (`resources_text`, `waiting_lines`, ...); and
three modules read by their qualified names, whose functions say their job only so
(`storage.join`, `jobs.stop`): `storage` (checkpoint and Tune-state storage, a folder or
an S3 URI), `jobs` (`sweep submit`, `sweep logs`, a stop or resume as a Ray Job) and
`ray_adapter` (what no public Ray API offers, in one adapter).

The private modules: `_connect` (the trial processes' Ray settings too) and `_placement`.
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "storage", "jobs", "ray_adapter",  # the modules read by their qualified names
    "LOCAL_CLUSTER", "check_address", "cluster_address", "job_metadata", "start_ray", "starts_own_cluster",
    "stop_local_cluster", "free_resources_text", "reserving_groups",
    "resources_text", "waiting_lines",
    "set_auth_mode_before_ray_loads",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "LOCAL_CLUSTER": "_connect", "check_address": "_connect", "cluster_address": "_connect",
    "job_metadata": "_connect", "start_ray": "_connect", "starts_own_cluster": "_connect",
    "stop_local_cluster": "_connect",
    "free_resources_text": "_placement",
    "reserving_groups": "_placement", "resources_text": "_placement", "waiting_lines": "_placement",
    "set_auth_mode_before_ray_loads": "_connect",
}

__getattr__ = lazy_getattr(__name__, _HOME)
