"""Sweep storage: where a sweep's Tune state and Train checkpoints go, and whether every
node of the cluster can reach it. On one machine any folder does; on several nodes,
Train workers on other nodes write checkpoints there, so it must be a shared file
system mounted at the same path on every node."""

from __future__ import annotations

from pathlib import Path

from sweeper.errors import UserError

# File-system types whose folders other machines can mount too (from /proc/self/mounts).
SHARED_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "efs", "wekafs", "virtiofs", "9p"}
)


def filesystem_type(path: Path, mounts_text: str) -> str | None:
    """The type of the file system holding `path`, from the text of /proc/self/mounts
    (the longest mount point that contains it); None when no mount matches."""
    path = Path(path).resolve()
    best: tuple[int, str] | None = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = Path(fields[1].replace("\\040", " "))
        if path == mount_point or mount_point in path.parents:
            if best is None or len(mount_point.parts) > best[0]:
                best = (len(mount_point.parts), fields[2])
    return best[1] if best else None


def is_shared(path: Path, mounts_text: str) -> bool:
    kind = filesystem_type(path, mounts_text)
    return kind is not None and (kind in SHARED_FILESYSTEMS or kind.startswith("fuse."))


def check_reachable_by_every_node(sweep_dir: Path, node_count: int, mounts_text: str) -> None:
    """Refuse a sweep folder on this machine's own disk when the cluster has other nodes.

    Raises:
        UserError: keyed `output_dir`, naming the folder and what to set instead.
    """
    if node_count > 1 and not is_shared(sweep_dir, mounts_text):
        raise UserError(
            f"output_dir: the sweep's checkpoints would go to {sweep_dir} on this machine's own disk "
            f"({filesystem_type(sweep_dir, mounts_text) or 'unknown'} file system), which the other "
            f"{node_count - 1} node(s) of the cluster cannot reach; set output_dir to a folder on a shared "
            "file system (NFS, EFS, Lustre) mounted at the same path on every node"
        )


def read_mounts() -> str:
    try:
        return Path("/proc/self/mounts").read_text()
    except OSError:  # not Linux: nothing known, every folder counts as local
        return ""
