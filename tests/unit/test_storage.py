"""storage.uri: which URIs are accepted, how a path in object storage is written as one
string, and copies to and from a folder through pyarrow's local file system."""

from __future__ import annotations

import pytest

from sweeper.cluster import storage
from sweeper.errors import UserError
from sweeper.spec.load import validate_spec
from tests.conftest import small_sweep


def test_object_storage_and_folders_are_told_apart():
    assert storage.is_remote("s3://bucket/prefix") and storage.is_remote("gs://b/p")
    assert not storage.is_remote("/mnt/shared/sweeps") and not storage.is_remote("sweeps/x")
    assert storage.uri_problem("ftp://host/x").startswith("unsupported scheme ftp://")
    assert storage.uri_problem("s3://") == "s3:// names no bucket; expected s3://bucket/prefix"
    assert storage.uri_problem("s3://bucket/p") is None and storage.uri_problem("/x") is None


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
