"""What trials hold and wait for on the cluster, through Ray's public placement-group and
state APIs: for a sweep that has heard nothing for a while, what the cluster is waiting on.

Called from the driver (sweeper/run/_watchdog.py) and from a trial's process
(sweeper/run/_trial.py, when its workers cannot be placed); Ray is up."""

from __future__ import annotations

__all__ = ["reserving_groups", "free_resources_text", "resources_text", "waiting_lines"]


def reserving_groups() -> list[dict]:
    """The placement-group table's entries placed or waiting to be that reserve at least
    one CPU, GPU or custom resource: one-worker trials' own (their process trains) and
    Train runs' groups, not the own of several-worker trials (which reserve almost nothing)."""
    from ray.util.placement_group import placement_group_table

    return [
        group
        for group in placement_group_table().values()
        if group.get("state") in ("CREATED", "PENDING", "RESCHEDULING")
        and any(
            amount >= 1 for bundle in group["bundles"].values() for name, amount in bundle.items() if name != "memory"
        )
    ]


def resources_text(resources: dict) -> str:
    """`{CPU: 2, trainer: 1}` as "2 CPU, 1 trainer"; memory, Ray's node markers and the
    per-placement-group copies of resources ("CPU_group_<id>") left out."""
    shown = {
        name: amount
        for name, amount in sorted(resources.items())
        if amount
        and not name.startswith("node:")
        and "_group_" not in name
        and name not in ("memory", "object_store_memory")
    }
    return ", ".join(f"{amount:g} {name}" for name, amount in shown.items()) or "nothing"


def free_resources_text() -> str:
    """What the cluster has free now, in words."""
    import ray

    return resources_text(ray.available_resources())


def waiting_lines() -> list[str]:
    """What the cluster waits on now, one line each: placement groups not yet placed (with
    the bundles they ask for), placement groups placed, actors waiting to be created, and
    the free resources."""
    import ray
    from ray.util.state import list_actors

    groups = reserving_groups()
    pending = [g for g in groups if g["state"] != "CREATED"]
    placed = [g for g in groups if g["state"] == "CREATED"]
    lines = [
        f"placement group {g['placement_group_id'][:8]} waits for {_bundles_text(g)}" for g in pending
    ] + [f"placement group {g['placement_group_id'][:8]} holds {_bundles_text(g)}" for g in placed]
    try:
        waiting_actors = list_actors(filters=[("state", "=", "PENDING_CREATION")], limit=100, timeout=10)
    except Exception as exc:  # the state API is the dashboard's; it may be down or slow
        lines.append(f"actors waiting to start: unknown ({type(exc).__name__})")
    else:
        if waiting_actors:
            names = sorted({a.class_name for a in waiting_actors})
            lines.append(f"{len(waiting_actors)} actor(s) waiting to start ({', '.join(names)})")
    lines.append(f"free: {resources_text(ray.available_resources())} of {resources_text(ray.cluster_resources())}")
    return lines


def _bundles_text(group: dict) -> str:
    bundles = list(group["bundles"].values())
    return f"{len(bundles)} x ({resources_text(bundles[0])})" if bundles else "nothing"
