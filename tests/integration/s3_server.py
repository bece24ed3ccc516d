"""An S3-compatible server on loopback for the tests of `storage.uri: s3://...`: moto's
server (`moto[server]`, the dev extra) in its own process session, ended by its pid."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import end_process_group
from tests.ports import free_port

MOTO_SERVER = str(Path(sys.executable).with_name("moto_server"))


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]  # the AWS variables a client needs (endpoint, region, test keys)

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.env["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@contextlib.contextmanager
def s3_server(log_path: Path, secret: str = "sweeper-test-secret-key"):
    """A running moto server; ended (its whole process session) when the block ends."""
    port = free_port()
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.time() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline, "moto_server did not listen"
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "sweeper-test-key",
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            # MLflow's S3 artifact store (boto3) reads its own variable for the endpoint.
            "MLFLOW_S3_ENDPOINT_URL": endpoint,
        }
        yield S3Server(endpoint, env)
    finally:
        end_process_group(process, grace_s=20)
        log.close()
