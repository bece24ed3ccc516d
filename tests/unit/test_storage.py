"""storage.uri: which URIs are accepted, how a path in object storage is written as one
string, and copies to and from a folder through pyarrow's local file system."""

from __future__ import annotations

import pytest

from sweeper.cluster import storage
from sweeper.errors import UserError
from sweeper.spec._load import validate_spec
from sweeper.spec._sections import uri_problem
from tests.conftest import small_sweep


def test_object_storage_and_folders_are_told_apart():
    assert storage.is_remote("s3://bucket/prefix") and storage.is_remote("gs://b/p")
    assert not storage.is_remote("/mnt/shared/sweeps") and not storage.is_remote("sweeps/x")
    assert uri_problem("ftp://host/x").startswith("unsupported scheme ftp://")
    assert uri_problem("s3://") == "s3:// names no bucket; expected s3://bucket/prefix"
    assert uri_problem("s3://bucket/p") is None and uri_problem("/x") is None


def test_storage_uri_is_checked_and_a_relative_folder_is_relative_to_the_yaml(tmp_path):
    spec = validate_spec(small_sweep("a", storage={"uri": "s3://team-sweeps/a/"}), base_dir=tmp_path)
    assert spec.storage_uri == "s3://team-sweeps/a"
    spec = validate_spec(small_sweep("a", storage={"uri": "store/a"}), base_dir=tmp_path)
    assert spec.storage_uri == str(tmp_path / "store" / "a")
    assert validate_spec(small_sweep("a"), base_dir=tmp_path).storage_uri == str(spec.sweep_dir)
    with pytest.raises(UserError, match=r"storage.uri: unsupported scheme ftp://"):
        validate_spec(small_sweep("a", storage={"uri": "ftp://x/y"}), base_dir=tmp_path)


def test_folders_round_trip_through_upload_and_download(tmp_path):
    source = tmp_path / "tokenizer"
    source.mkdir()
    (source / "tokenizer_config.json").write_text("{}")
    target = str(tmp_path / "store" / "tokenizer")
    storage.upload(source, target)
    assert storage.exists(storage.join(target, "tokenizer_config.json"))
    copied = storage.download(target, tmp_path / "back")
    assert (copied / "tokenizer_config.json").read_text() == "{}"
    storage.delete(target)
    assert not storage.exists(target)
    storage.delete(target)  # gone already: nothing to do


def test_unwritable_storage_is_a_keyed_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"^storage.uri: cannot write to .*file/sub"):
        storage.check_writable(str(tmp_path / "file" / "sub"))


def test_the_endpoint_and_region_travel_to_the_nodes_and_no_secret_does():
    environ = {
        "AWS_ENDPOINT_URL": "http://minio.internal:9000", "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIA-key", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
        "AWS_PROFILE": "team", "HOME": "/root",
    }
    # The endpoint the driver resolved also as the S3-specific one, which would win on a
    # node that has its own (pyarrow reads AWS_ENDPOINT_URL_S3 first).
    assert storage.travelling_settings("s3://b/p", environ) == {
        "AWS_ENDPOINT_URL": "http://minio.internal:9000", "AWS_ENDPOINT_URL_S3": "http://minio.internal:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert storage.travelling_settings("s3://b/p", {"AWS_ENDPOINT_URL_S3": "http://s3.x"}) == {
        "AWS_ENDPOINT_URL_S3": "http://s3.x"
    }
    assert storage.travelling_settings("/mnt/shared/sweeps", environ) == {}
    assert storage.travelling_settings("s3://b/p", {"AWS_SECRET_ACCESS_KEY": "secret"}) == {}


def test_a_probe_of_a_folder_writes_reads_and_deletes(tmp_path):
    assert storage.probe_storage(str(tmp_path), ".probe") is None
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("")
    failed = storage.probe_storage(str(tmp_path / "file"), ".probe")
    assert failed is not None and failed["problem"]


def test_what_a_node_lacks_is_named():
    lacking_keys = {"problem": "AWS Error ACCESS_DENIED during PutObject", "credentials": [], "endpoint": "http://s3:9"}
    assert storage.node_problem("s3://b/p", "10.0.0.7", lacking_keys, 3) == (
        "storage.uri: this machine can write to s3://b/p, but node 10.0.0.7 (one of 3) cannot (AWS Error "
        "ACCESS_DENIED during PutObject): it has no AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "or AWS_PROFILE), which a sweep never sends with its job (the dashboard shows a job's environment): set "
        "them in each node's environment before `ray start`, or give the nodes an instance role"
    )
    unreachable = {"problem": "Could not resolve host: s3", "credentials": ["AWS_ACCESS_KEY_ID"], "endpoint": "http://s3:9"}
    line = storage.node_problem("s3://b/p", "10.0.0.7", unreachable, 1)
    assert line.startswith("storage.uri: this machine can write to s3://b/p, but node 10.0.0.7 cannot (Could not")
    assert line.endswith("it cannot reach the storage at http://s3:9, or the storage refuses its credentials: the endpoint "
                         "must answer from every node as it does here, with credentials set on each node")
    no_endpoint = {**unreachable, "endpoint": None}
    assert storage.node_problem("s3://b/p", "10.0.0.7", no_endpoint, 1).endswith(
        "it has no S3 endpoint and AWS's default one does not answer there: set AWS_ENDPOINT_URL where the sweep "
        "starts (it is sent with the job) or on each node before `ray start`"
    )
