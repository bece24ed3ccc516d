"""A sweep that posts its events to two webhooks on loopback, one answering and one that
hangs: the sweep finishes all the same, the answering webhook gets the sweep's start, its
new best trials and its end, the summary names what the hanging one did not get, and the
URLs (secrets) are nowhere in the output, the sweep folder or the MLflow store."""

import pytest

from tests.conftest import WEBHOOK_SECRET, small_sweep, write_yaml
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration


@pytest.mark.story
def test_a_sweep_notifies_and_a_hanging_webhook_does_not_hold_it_up(tmp_path, answering_webhook, hanging_webhook):
    raw = small_sweep("notified", search={"num_trials": 3},
                      notify={"webhooks": [{"url": answering_webhook.url}, {"url": hanging_webhook}],
                              "timeout_seconds": 1, "attempts": 1})
    path = write_yaml(tmp_path / "notified.yaml", raw)
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]

    received = answering_webhook.wait_for(3)
    events = [body["event"] for body in received]
    assert events[0] == "started" and "new_best" in events and events[-1] == "finished", events
    assert received[0]["text"].startswith("Sweep 'notified' started: 3 trials")
    finished = received[-1]
    assert finished["sweep"] == "notified" and finished["metric"] == "eval_loss"
    best = [body for body in received if body["event"] == "new_best"][-1]
    assert (finished["best_trial"], finished["value"]) == (best["trial"], best["value"])
    assert f"Best trial {finished['best_trial']}" in out

    [line] = [line for line in out.splitlines() if line.startswith("Notifications:")]
    assert "not delivered: notify.webhooks.1: " in line and "started" in line and "finished" in line, line
    assert "notify.webhooks.0" not in line
    assert WEBHOOK_SECRET not in out
    # Every file the sweep wrote (sweep folder, MLflow store and artifacts); the user's own YAML holds it.
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != path]
    assert [p for p in written if WEBHOOK_SECRET.encode() in p.read_bytes()] == []
