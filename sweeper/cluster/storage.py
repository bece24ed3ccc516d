"""Sweep storage (`storage.uri`): where a sweep's Tune state and Train checkpoints go, how
they are read back, and whether every node of the cluster reaches them: on several nodes it
must be object storage (s3://bucket/prefix), probed from every node before any trial
starts, or a shared file system mounted at the same path on every node. Also a full disk:
how it reads once Ray has carried the error, and the line a sweep stops with."""

from __future__ import annotations

import os
from pathlib import Path

from sweeper.errors import UserError
from sweeper.spec import REMOTE_SCHEMES, is_remote

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


def check_reachable_by_every_node(storage_uri: str, node_count: int, mounts_text: str) -> None:
    """Refuse sweep storage on this machine's own disk when the cluster has other nodes
    (object storage, s3://..., every node reaches).

    Raises:
        UserError: keyed `storage.uri`, naming the folder and what to set instead.
    """
    if node_count <= 1 or is_remote(storage_uri):
        return
    folder = Path(storage_uri)
    if not is_shared(folder, mounts_text):
        raise UserError(
            f"storage.uri: the sweep's checkpoints would go to {folder} on this machine's own disk "
            f"({filesystem_type(folder, mounts_text) or 'unknown'} file system), which the other "
            f"{node_count - 1} node(s) of the cluster cannot reach; set storage.uri to s3://bucket/prefix "
            "(or a folder on a shared file system, NFS, EFS, Lustre, mounted at the same path on every node)"
        )


def read_mounts() -> str:
    try:
        return Path("/proc/self/mounts").read_text()
    except OSError:  # not Linux: nothing known, every folder counts as local
        return ""


# ---------------------------------------------------------------- storage.uri
# Through pyarrow file systems, as Ray itself writes them (for s3://, the usual AWS
# variables, read by pyarrow on each node).

def filesystem(uri: str):
    """The pyarrow file system and the path within it that `uri` names (Ray's
    `storage_filesystem` and `storage_path`)."""
    import pyarrow.fs

    if is_remote(uri):
        fs, path = pyarrow.fs.FileSystem.from_uri(str(uri))
        return fs, path.rstrip("/")
    return pyarrow.fs.LocalFileSystem(), str(Path(uri).resolve())


def uri_of(fs, path: str) -> str:
    """One string for a (file system, path) pair, such as a Train checkpoint's: a URI
    for object storage, the plain path for a folder."""
    kind = getattr(fs, "type_name", "local")
    return f"{kind}://{path}" if kind in REMOTE_SCHEMES else path


def join(uri: str, *parts: str) -> str:
    return "/".join([str(uri).rstrip("/"), *parts])


def exists(uri: str) -> bool:
    import pyarrow.fs

    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def download(uri: str, local_dir: Path) -> Path:
    """Copy the folder or file at `uri` to `local_dir` (a file keeps its name)."""
    import pyarrow.fs

    fs, path = filesystem(uri)
    local_dir = Path(local_dir)
    local_dir.mkdir(parents=True, exist_ok=True)
    is_file = fs.get_file_info(path).type == pyarrow.fs.FileType.File
    target = local_dir / Path(path).name if is_file else local_dir
    pyarrow.fs.copy_files(path, str(target), source_filesystem=fs, destination_filesystem=pyarrow.fs.LocalFileSystem())
    return target


def upload(local: Path, uri: str) -> None:
    """Copy a local file or folder to `uri` (nothing to do when they are the same place)."""
    import pyarrow.fs

    fs, path = filesystem(uri)
    if isinstance(fs, pyarrow.fs.LocalFileSystem) and Path(path) == Path(local).resolve():
        return
    if Path(local).is_dir():
        fs.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(str(local), path, source_filesystem=pyarrow.fs.LocalFileSystem(), destination_filesystem=fs)


def delete(uri: str) -> None:
    """Remove the folder at `uri`, if it is there."""
    import pyarrow.fs

    fs, path = filesystem(uri)
    try:
        if fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound:
            fs.delete_dir(path)
    except OSError:
        pass  # already gone (another janitor pass), or not ours to remove


def check_writable(uri: str) -> None:
    """Refuse storage that cannot be written (a bucket that does not exist, wrong
    credentials, no endpoint answering), before anything starts.

    Raises:
        UserError: keyed `storage.uri`, with the file system's own reason (never a secret).
    """
    import pyarrow.fs

    try:
        fs, path = filesystem(uri)
        if fs.get_file_info(path).type == pyarrow.fs.FileType.File:
            raise UserError(f"storage.uri: {uri} is a file, not a folder; give a prefix (s3://bucket/prefix) or a folder")
        probe = join(path, ".sweeper-write-check")
        with fs.open_output_stream(probe) as stream:
            stream.write(b"ok")
        fs.delete_file(probe)
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises OSError or ArrowInvalid with the SDK's text
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"storage.uri: cannot write to {uri} ({reason}); check the bucket and, for s3://, "
            "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        ) from None


# ---------------------------------------------------------------- what the nodes see
# The trials write checkpoints with each node's environment, not the driver's: the endpoint
# and region the driver used travel with the sweep's job (its runtime_env, which the
# dashboard shows: never a secret), and a probe from every node checks the rest.

# Settings of object storage, not secret, that name the same place on every node.
TRAVELLING_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION")
# What authenticates a node to object storage: set on the nodes themselves, never sent.
CREDENTIAL_SETTINGS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
NODE_CHECK_TIMEOUT_S = 60.0


def travelling_settings(uri: str, environ) -> dict[str, str]:
    """The driver's settings that tell pyarrow where `uri`'s object storage is (endpoint,
    region), for the job's runtime_env; {} for a folder. The S3 endpoint the driver
    resolves (AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL) goes as AWS_ENDPOINT_URL_S3
    too, so that a node's own stale one cannot take precedence. No credentials."""
    if not str(uri).startswith("s3://"):
        return {}
    settings = {name: environ[name] for name in TRAVELLING_SETTINGS if environ.get(name)}
    endpoint = settings.get("AWS_ENDPOINT_URL_S3") or settings.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings["AWS_ENDPOINT_URL_S3"] = endpoint
    return settings


def probe_storage(uri: str, name: str) -> dict | None:
    """Write, read back and delete a probe object `name` under `uri`, as a trial would
    write a checkpoint there. None when it worked; else what failed, with the names
    (never the values) of the credential settings this process has."""
    problem = None
    try:
        fs, path = filesystem(uri)
        probe, sent = join(path, name), f"sweeper storage probe {name}".encode()
        with fs.open_output_stream(probe) as stream:
            stream.write(sent)
        with fs.open_input_stream(probe) as stream:
            got = stream.read()
        fs.delete_file(probe)
        if got != sent:
            problem = f"a probe read back {len(got)} bytes, not the {len(sent)} written (unsigned requests?)"
    except Exception as exc:  # pyarrow raises OSError or ArrowInvalid with the SDK's text
        problem = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if problem is None:
        return None
    return {
        "problem": problem,
        "credentials": [setting for setting in CREDENTIAL_SETTINGS if os.environ.get(setting)]
        + (["~/.aws/credentials"] if (Path.home() / ".aws" / "credentials").is_file() else []),
        "endpoint": os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
    }


def check_from_every_node(uri: str, timeout_s: float = NODE_CHECK_TIMEOUT_S) -> None:
    """Probe object storage from a task on every live node of the cluster joined (in the
    sweep's job, with its runtime_env) before any trial starts.

    Raises:
        UserError: keyed `storage.uri`, naming the node and what it lacks.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not is_remote(uri):
        return
    probe = ray.remote(num_cpus=0, max_retries=0)(probe_storage)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    pending = {
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
            uri, f".sweeper-node-check-{node['NodeID'][:12]}"
        ): node
        for node in nodes
    }
    done, late = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    for ref in late:
        ray.cancel(ref, force=True)
    if late:
        node = pending[late[0]]
        raise UserError(
            f"storage.uri: node {node['NodeManagerAddress']} did not write a probe to {uri} within {timeout_s:.0f} s; "
            "check that every node reaches the storage (AWS_ENDPOINT_URL, network) before starting the sweep"
        )
    for ref in done:
        failed = ray.get(ref)
        if failed:
            raise UserError(node_problem(uri, pending[ref]["NodeManagerAddress"], failed, len(nodes)))


def check_every_node_reaches(uri: str, travelling: dict[str, str]) -> str | None:
    """On a cluster joined: refuse storage some node cannot reach (a folder on this
    machine's own disk with other nodes; object storage a node's probe cannot write), and
    say what was probed and which `travelling` settings went with the job (None: none).

    Raises:
        UserError: keyed `storage.uri`.
    """
    import ray

    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    check_reachable_by_every_node(uri, nodes, read_mounts())
    check_from_every_node(uri)
    if not travelling:
        return None
    return (f"Storage {uri}: written from every node (probed); sent with the job: "
            + ", ".join(f"{name}={value}" for name, value in sorted(travelling.items())))


def node_problem(uri: str, node_address: str, failed: dict, node_count: int) -> str:
    """The keyed line for storage that this machine writes and a node of the cluster does
    not (`failed`: what `probe_storage` returned there): what the node lacks."""
    where = f"node {node_address}" + (f" (one of {node_count})" if node_count > 1 else "")
    if not failed["credentials"]:
        lacks = (
            "it has no AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), which a "
            "sweep never sends with its job (the dashboard shows a job's environment): set them in each node's "
            "environment before `ray start`, or give the nodes an instance role"
        )
    elif not failed["endpoint"]:
        lacks = (
            "it has no S3 endpoint and AWS's default one does not answer there: set AWS_ENDPOINT_URL where "
            "the sweep starts (it is sent with the job) or on each node before `ray start`"
        )
    else:
        lacks = (
            f"it cannot reach the storage at {failed['endpoint']}, or the storage refuses its credentials: the endpoint "
            "must answer from every node as it does here, with credentials set on each node"
        )
    return f"storage.uri: this machine can write to {uri}, but {where} cannot ({failed['problem']}): {lacks}"


# ---------------------------------------------------------------- a full disk

# What a full file system reads as once Ray has carried the error across processes (its
# wrappers keep the text of the error they wrap): the OSError's (ENOSPC), SQLite's (the
# Optuna study, a SQLite MLflow store).
DISK_FULL_TEXTS = ("No space left on device", "[Errno 28]", "database or disk is full")


def disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or anything it wraps (its cause, context, Ray's wrapped errors),
    is a full file system."""
    import errno

    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return True
        if any(text in str(current) for text in DISK_FULL_TEXTS):
            return True
        pending += [current.__cause__, current.__context__]
        for attribute in ("worker_failures", "controller_failure", "health_check_failure", "cause"):
            inner = getattr(current, attribute, None)
            pending += list(inner.values()) if isinstance(inner, dict) else [inner]
    return False


def existing_folder(path: Path) -> Path:
    """`path`, or its nearest folder that exists (a sweep folder not made yet)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    import shutil

    return shutil.disk_usage(existing_folder(path)).free


def size_text(size: float) -> str:
    """Bytes in the largest unit that keeps the figure at 1 or above: 512 B, 3.2 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def disk_full_line(folder: Path, name: str) -> str:
    """One line for a sweep stopped by a full disk: where, what is free, what to do."""
    return (
        f"output_dir: the file system of {folder} is full ({size_text(free_bytes(folder))} free); the sweep "
        f"stopped, its trials saved where they could be. Free space there, then continue it with: sweep resume {name}"
    )
