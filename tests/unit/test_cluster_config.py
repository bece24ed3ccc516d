"""Joining a Ray cluster (sweeper/run/connect.py) without Ray: which address a sweep uses,
when it runs in token mode, how an address that does not answer is refused; and cluster.yaml against Ray's own cluster-launcher schema."""

import json
import socket
from pathlib import Path

import pytest
import yaml

from sweeper.cluster import _connect as connect
from sweeper.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "given, environ, expected",
    [
        (None, {}, "local"),
        (None, {"RAY_ADDRESS": "10.0.0.5:6379"}, "10.0.0.5:6379"),
        ("auto", {"RAY_ADDRESS": "10.0.0.5:6379"}, "auto"),
        ("ray://head:10001", {}, "ray://head:10001"),
        ("", {"RAY_ADDRESS": ""}, "local"),
    ],
)
def test_a_sweep_starts_its_own_cluster_unless_given_an_address(given, environ, expected):
    assert connect.cluster_address(given, environ) == expected
    assert connect.starts_own_cluster(connect.cluster_address(given, environ)) == (expected == "local")


def test_a_token_is_found_where_ray_looks_in_ray_order(tmp_path):
    home = tmp_path / "home"
    assert connect.auth_token_source({}, home) is None
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("secret-in-home")
    assert connect.auth_token_source({}, home) == str(home / ".ray" / "auth_token")
    token_file = tmp_path / "token"
    token_file.write_text("secret-in-file")
    assert connect.auth_token_source({"RAY_AUTH_TOKEN_PATH": str(token_file)}, home) == str(token_file)
    assert connect.auth_token_source({"RAY_AUTH_TOKEN": "secret-in-env", "RAY_AUTH_TOKEN_PATH": str(token_file)}, home) == "RAY_AUTH_TOKEN"
    # A path that names no file is not a token.
    assert connect.auth_token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}, tmp_path) is None


def test_a_joining_client_uses_token_mode_only_when_a_token_exists_and_the_user_chose_no_mode(tmp_path):
    assert connect.client_auth_settings({}, tmp_path) == {}
    assert connect.client_auth_settings({"RAY_AUTH_TOKEN": "x"}, tmp_path) == {"RAY_AUTH_MODE": "token"}
    assert connect.client_auth_settings({"RAY_AUTH_TOKEN": "x", "RAY_AUTH_MODE": "disabled"}, tmp_path) == {}


def test_the_refusal_without_a_token_says_how_to_get_one_and_never_shows_a_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert "ray get-auth-token" in connect.auth_problem("10.0.0.5:6379")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cr3t-token-value")
    line = connect.auth_problem("10.0.0.5:6379")
    assert line.startswith("--address:") and "RAY_AUTH_TOKEN" in line and "s3cr3t" not in line


def test_the_refusal_of_a_client_with_auth_off_names_its_mode_not_a_refused_token(tmp_path, monkeypatch):
    # RAY_AUTH_MODE=disabled keeps Ray from sending the token it finds: "refused the token"
    # would send the user to fetch a token they already have.
    token = tmp_path / "token"
    token.write_text("secret-token")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    line = connect.auth_problem("10.0.0.5:6379")
    assert line.startswith("--address: the Ray cluster at 10.0.0.5:6379 requires an authentication token, but RAY_AUTH_MODE=disabled")
    assert f"the token from {token} would be sent without it; unset RAY_AUTH_MODE" in line
    assert "refused" not in line and "secret-token" not in line
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv("HOME", str(tmp_path))
    line = connect.auth_problem("10.0.0.5:6379")
    assert "unset RAY_AUTH_MODE (or set it to token) and put the token from `ray get-auth-token`" in line


def test_the_probe_reads_host_and_port_from_every_address_form(tmp_path):
    assert connect.bootstrap_endpoint("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert connect.bootstrap_endpoint("ray://head.example:10001") == ("head.example", 10001)
    address_file = tmp_path / "ray_current_cluster"
    assert connect.bootstrap_endpoint("auto", address_file) is None
    address_file.write_text("127.0.0.1:46379\n")
    assert connect.bootstrap_endpoint("auto", address_file) == ("127.0.0.1", 46379)
    with pytest.raises(UserError, match=r"^--address: expected auto, HOST:PORT"):
        connect.bootstrap_endpoint("head-without-port")


def test_an_address_that_does_not_answer_is_one_keyed_line_at_once():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(UserError, match=rf"^--address: no Ray cluster answers at 127.0.0.1:{port} "):
            connect.check_reachable(f"127.0.0.1:{port}", ("127.0.0.1", port), timeout_s=5)
    with pytest.raises(UserError, match=r"^--address: auto found no running Ray cluster"):
        connect.check_reachable("auto", None)


def test_an_address_that_answers_passes_the_probe():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        connect.check_reachable(f"127.0.0.1:{port}", ("127.0.0.1", port), timeout_s=5)


@pytest.mark.parametrize("body, expected", [(b'{"authentication_mode": "disabled"}', "disabled"), (b"<html>", None)])
def test_the_clusters_auth_mode_is_what_its_dashboard_says_and_none_when_it_cannot_say(body, expected):
    import http.server
    import threading

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/api/authentication_mode" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert connect.cluster_auth_mode(f"http://127.0.0.1:{server.server_port}") == expected
    finally:
        server.shutdown()
        server.server_close()
    assert connect.cluster_auth_mode(None) is None
    assert connect.cluster_auth_mode(f"http://127.0.0.1:{server.server_port}") is None  # gone


def test_the_refusal_of_a_token_for_a_cluster_without_auth_names_both_fixes(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("secret-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    line = connect.token_to_a_cluster_without_auth("10.0.0.1:6379")
    assert line.startswith("--address: the Ray cluster at 10.0.0.1:6379 has token authentication off")
    assert f"the token from {token}" in line and "set RAY_AUTH_MODE=disabled here too" in line
    assert "secret-token" not in line


def test_cluster_yaml_is_a_valid_ray_cluster_launcher_config():
    import jsonschema
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert config["head_node_type"] in config["available_node_types"]
    gpu_types = [t for t in config["available_node_types"].values() if t["resources"].get("GPU", 0) > 0]
    assert gpu_types, "cluster.yaml has no GPU worker type"
    commands = "\n".join(config["setup_commands"] + config["head_setup_commands"])
    assert "scripts/setup.sh" in commands and "RAY_ADDRESS=auto" in commands and "/mnt/sweeps" in commands
    assert all("RAY_AUTH_MODE=token" in c for c in config["worker_start_ray_commands"] if "ray start" in c)


MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
fs-1234.efs.us-west-2.amazonaws.com:/ /mnt/shared nfs4 rw,vers=4.1 0 0
/dev/sdb1 /mnt/shared/local-cache xfs rw 0 0
"""


def test_a_local_sweep_folder_is_refused_only_on_a_multi_node_cluster():
    from sweeper.cluster import storage

    storage.check_reachable_by_every_node("/home/me/sweeps/a", 1, MOUNTS)
    with pytest.raises(UserError, match=r"^storage.uri: the sweep's checkpoints would go to /home/me/sweeps/a .*\(ext4 .*2 node\(s\).*s3://bucket/prefix.*shared file system"):
        storage.check_reachable_by_every_node("/home/me/sweeps/a", 3, MOUNTS)
    storage.check_reachable_by_every_node("s3://team-sweeps/a", 3, MOUNTS)


def test_a_folder_on_a_shared_file_system_is_accepted_by_its_innermost_mount():
    from sweeper.cluster import storage

    storage.check_reachable_by_every_node("/mnt/shared/sweeps/a", 3, MOUNTS)
    assert storage.filesystem_type(Path("/mnt/shared/local-cache/x"), MOUNTS) == "xfs"
    with pytest.raises(UserError, match=r"^storage.uri:"):
        storage.check_reachable_by_every_node("/mnt/shared/local-cache/x", 2, MOUNTS)


def test_a_submitted_sweep_needs_object_storage_or_an_absolute_folder_that_outlives_its_job(tmp_path):
    from sweeper.cluster import jobs

    path = tmp_path / "s.yaml"
    path.write_text("name: s\noutput_dir: /mnt/sweeps/s\n")
    assert jobs.submitted_sweep(path) == ("s", "/mnt/sweeps/s", None)
    path.write_text("name: s\nstorage:\n  uri: s3://bucket/sweeps/s/\n")
    assert jobs.submitted_sweep(path) == ("s", None, "s3://bucket/sweeps/s")
    path.write_text("name: s\nstorage:\n  uri: /mnt/local/s\n")
    with pytest.raises(UserError, match=r"^output_dir: a submitted sweep needs storage.uri on object storage .* got None"):
        jobs.submitted_sweep(path)


def test_a_resume_job_fetches_a_sweep_with_object_storage_from_there():
    from sweeper.cluster import jobs

    assert jobs.resume_args("s", None, "s3://b/s") == ["s", "--storage", "s3://b/s"]
    assert jobs.resume_args("s", "/mnt/sweeps/s", None) == ["s", "--sweep-dir", "/mnt/sweeps/s"]


def test_the_yaml_travels_inside_the_jobs_working_dir_and_runs_through_the_cli(tmp_path):
    from sweeper.cluster import jobs

    (tmp_path / "spaces").mkdir()
    assert jobs.working_dir_path(tmp_path / "spaces" / "a b.yaml", tmp_path) == "spaces/a b.yaml"
    assert jobs.job_entrypoint("start", "spaces/a b.yaml") == "python -m sweeper.cli start 'spaces/a b.yaml'"
    with pytest.raises(UserError, match=r"^FILE: .* is outside the folder sent to the cluster"):
        jobs.working_dir_path(Path("/elsewhere/a.yaml"), tmp_path)


def test_a_job_client_wants_the_dashboard_address():
    from sweeper.cluster import jobs

    with pytest.raises(UserError, match=r"^--address: give the cluster's dashboard, http://HEAD:8265, got '10.0.0.5:6379'"):
        jobs.client("10.0.0.5:6379")
