"""Shared fixtures. Integration tests use the real stack (Ray, MLflow, training); the
built-in tiny model is built once into the user cache and reused."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


SFT_TRAIN = REPO / "data" / "sft" / "train.jsonl"
SFT_EVAL = REPO / "data" / "sft" / "eval.jsonl"


def small_sweep(name: str, **sections) -> dict:
    """A small SFT sweep on the tiny model and shipped data; sections override defaults."""
    raw = {
        "name": name,
        "task": "sft",
        "data": {"train": str(SFT_TRAIN), "eval": str(SFT_EVAL), "max_length": 96},
        "training": {"max_steps": 30, "eval_every": 10, "per_device_batch_size": 8, "learning_rate": 3e-3},
        "search": {
            "num_trials": 4,
            "parameters": {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2}},
        },
        "early_stopping": {"scheduler": "asha", "grace_period": 10, "reduction_factor": 3},
        # The forecast from the throughput model: a calibration costs a sweep seconds.
        # The shared finished sweep and the budget tests calibrate.
        "cost": {"calibrate": False},
    }
    return merge_sections(raw, sections)


def merge_sections(raw: dict, sections: dict) -> dict:
    """`raw` with each of `sections` merged over its section (replacing non-dict values)."""
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def write_yaml(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def sweep_yaml(tmp_path):
    """Write a small sweep file into tmp_path; its output goes to tmp_path/sweeps."""

    def make(name: str = "t", **sections) -> Path:
        raw = small_sweep(name, **sections)
        raw.setdefault("output_dir", str(tmp_path / "sweeps" / name))
        return write_yaml(tmp_path / f"{name}.yaml", raw)

    return make


PREFERENCE_TRAIN = REPO / "data" / "preference" / "train.jsonl"
PREFERENCE_EVAL = REPO / "data" / "preference" / "eval.jsonl"


def markdown_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first table after `heading` in a Markdown file, as dicts."""
    after = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    table = []
    for line in after[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip()[1:-1].split(" | ")])
    return [dict(zip(table[0], row)) for row in table[2:]]


def small_dpo_sweep(name: str, **sections) -> dict:
    """A small DPO sweep over beta and learning rate on the shipped preference data."""
    raw = small_sweep(
        name,
        task="dpo",
        data={"train": str(PREFERENCE_TRAIN), "eval": str(PREFERENCE_EVAL), "max_length": 96},
        dpo={"beta": 0.1, "max_prompt_length": 64},
        lora={"dropout": 0.0},
        search={
            "metric": "eval_rewards_accuracy",
            "goal": "maximize",
            "num_trials": 4,
            "parameters": {
                "dpo.beta": {"distribution": "log_uniform", "low": 0.05, "high": 0.5},
                "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2},
            },
        },
    )
    return merge_sections(raw, sections)


def wait_for(condition, timeout: float, what: str, every: float = 2):
    """The first truthy value of `condition()`, polled `every` seconds for `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- webhooks on loopback (notify)

# In the path of every test webhook's URL: a secret that no output, file or store may hold.
WEBHOOK_SECRET = "T000/B000/s3cr3t-t0ken"


class WebhookServer:
    """An HTTP server on loopback (port 0: the system picks a free one) that records each
    POST's JSON and answers each with the next status of `statuses` (200 once they run out)."""

    def __init__(self, statuses: tuple[int, ...] = ()):
        self.received: list[dict] = []
        self.statuses = list(statuses)
        self.arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = outer.statuses.pop(0) if outer.statuses else 200
                with outer.arrived:
                    outer.received.append(body)
                    outer.arrived.notify_all()
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{WEBHOOK_SECRET}"

    def wait_for(self, count: int, timeout_s: float = 60) -> list[dict]:
        """What it received, once `count` posts arrived (within moments; `timeout_s` is generous)."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, timeout_s), self.received
            return list(self.received)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def answering_webhook():
    """A webhook that answers 200 to every post; its URL holds WEBHOOK_SECRET."""
    server = WebhookServer()
    yield server
    server.close()


@pytest.fixture
def hanging_webhook():
    """A port that takes connections (the kernel's backlog) and never answers; its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/hang/{WEBHOOK_SECRET}"
    sock.close()


@pytest.fixture
def refusing_webhook():
    """A port held (bound, so no one else takes it) where nothing listens: refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/refuse/{WEBHOOK_SECRET}"
    sock.close()
