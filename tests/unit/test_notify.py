"""Notifications (sweeper/notify): the posts against real HTTP servers on loopback (one that
answers, one that hangs, a port that refuses), the events a sweep's record turns into, the
URL kept out of every line, dump and pickle, and the notify section's keyed lines."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cost import SweepCost
from sweeper.errors import UserError
from sweeper.names import TrialState
from sweeper.notify import Notifier, Webhook, WebhookSender, resolve_webhooks
from sweeper.spec import NOTIFY_EVENTS, spec_to_yaml, validate_spec
from sweeper.track import SweepBook, TrialRecord
from tests.conftest import WEBHOOK_SECRET as SECRET
from tests.conftest import WebhookServer, small_sweep, wait_for, write_yaml

DEADLINE_S = 60  # for an event that comes within moments; a generous bound, not a measure


def notify_section(timeout_seconds: float = 0.5, attempts: int = 2):
    return SimpleNamespace(timeout_seconds=timeout_seconds, attempts=attempts)


def webhook(key: str, url: str, events=NOTIFY_EVENTS) -> Webhook:
    return Webhook(key, url, frozenset(events))


def book_with(*trials: tuple[int, TrialState, float | None]) -> SweepBook:
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    for number, state, loss in trials:
        history = [{"step": 30, "eval_loss": loss}] if loss is not None else []
        book.trials[f"t{number}"] = TrialRecord(f"t{number}", number, {"training.learning_rate": 1e-3},
                                                state=state, history=history)
    return book


def finished_run(book: SweepBook, **fields) -> SimpleNamespace:
    run = dict(spec=SimpleNamespace(name="s"), book=book, cost=SweepCost(0.0123, 0.01, 1000, 0.0), wall_seconds=61.0,
               interrupted=False, stopped_for=None, notes=[])
    return SimpleNamespace(**{**run, **fields})


# ---------------------------------------------------------------- the posts


def test_posts_json_with_a_text_in_order(answering_webhook):
    sender = WebhookSender(webhook("notify.webhooks.0", answering_webhook.url), timeout_s=5, attempts=1)
    for n in range(3):
        sender.send("started", {"text": f"message {n}", "event": "started", "sweep": "s"})
    received = answering_webhook.wait_for(3)
    assert [body["text"] for body in received] == ["message 0", "message 1", "message 2"]
    assert sender.close(time.monotonic() + DEADLINE_S) == []
    assert sender.delivered == ["started"] * 3


def test_a_5xx_is_tried_again_and_a_404_is_not():
    server = WebhookServer(statuses=(503, 404))
    try:
        sender = WebhookSender(webhook("notify.webhooks.0", server.url), timeout_s=5, attempts=3)
        sender.send("started", {"text": "one"})  # 503, then 404: refused for good after two posts
        sender.send("finished", {"text": "two"})  # 200
        server.wait_for(3)
        assert sender.close(time.monotonic() + DEADLINE_S) == [("started", "answered 404 Not Found")]
        assert sender.delivered == ["finished"]
    finally:
        server.close()


def test_a_refused_webhook_is_named_with_why(refusing_webhook):
    sender = WebhookSender(webhook("notify.webhooks.0 (url_env HOOK)", refusing_webhook), timeout_s=5, attempts=2)
    sender.send("started", {"text": "one"})
    failed = sender.close(time.monotonic() + DEADLINE_S)
    assert failed == [("started", "connection refused; 2 tries")]


def test_a_hanging_webhook_holds_up_neither_the_sweep_nor_the_other_webhook(answering_webhook, hanging_webhook):
    notifier = Notifier("s", book_with(), [webhook("notify.webhooks.0", answering_webhook.url),
                                           webhook("notify.webhooks.1 (url_env HANG)", hanging_webhook)],
                        notify_section(timeout_seconds=1, attempts=2), cap_line=lambda ended: None)
    notifier.sweep_started("4 trials, 2 at a time", resumed=False)
    notifier.trial_finished(book_with((0, TrialState.FAILED, None)).trials["t0"])
    # The answering webhook gets both while the hanging one still holds its first post.
    assert [body["event"] for body in answering_webhook.wait_for(2)] == ["started", "trial_failed"]
    run = finished_run(book_with((0, TrialState.COMPLETED, 1.5)))
    began = time.monotonic()
    notifier.sweep_ended(run)
    assert time.monotonic() - began < DEADLINE_S  # bounded by notify.timeout_seconds, generously
    assert [body["event"] for body in answering_webhook.wait_for(3)] == ["started", "trial_failed", "finished"]
    [line] = run.notes
    assert line.startswith("Notifications: 3 not delivered: notify.webhooks.1 (url_env HANG): "), line
    # Each of its three, whether tried and timed out or still waiting when the wait ended.
    assert all(event in line for event in ("started", "trial_failed", "finished")), line
    assert "notify.webhooks.0" not in line
    assert SECRET not in line and "127.0.0.1" not in line


def test_a_webhook_whose_last_post_failed_is_not_waited_for_at_the_end(hanging_webhook):
    sender = WebhookSender(webhook("notify.webhooks.0", hanging_webhook), timeout_s=0.5, attempts=1)
    sender.send("started", {"text": "started"})
    wait_for(lambda: sender.failed, DEADLINE_S, "the first post to time out", every=0.1)
    sender.send("finished", {"text": "finished"})
    # With a deadline far off, the post under way is not waited for: had close waited, it
    # would have timed out and said so ("no answer within 0.5 s").
    failed = sender.close(time.monotonic() + DEADLINE_S)
    assert failed == [("started", "no answer within 0.5 s; 1 try"), ("finished", "not sent before the sweep ended")]


# ---------------------------------------------------------------- the events


def test_the_events_of_a_sweep(answering_webhook):
    cap = []
    book = book_with()
    notifier = Notifier("s", book, [webhook("notify.webhooks.0", answering_webhook.url)], notify_section(),
                        cap_line=lambda ended: cap[0] if cap else None)
    notifier.sweep_started("4 trials, 2 at a time", resumed=False)
    for number, state, loss in [(0, TrialState.COMPLETED, 2.0), (1, TrialState.PRUNED, 1.0),
                                (2, TrialState.COMPLETED, 2.5), (3, TrialState.COMPLETED, 1.2)]:
        book.trials[f"t{number}"] = record = book_with((number, state, loss)).trials[f"t{number}"]
        notifier.trial_finished(record)
    cap.append("budget.max_usd (0.01 USD) reached at 0.0123: stopped the running trials (none)")
    notifier.trial_result(book.trials["t3"])
    notifier.trial_result(book.trials["t3"])  # said once
    notifier.sweep_ended(finished_run(book))
    received = answering_webhook.wait_for(5)
    assert [body["event"] for body in received] == ["started", "new_best", "new_best", "budget_cap", "finished"]
    assert all(body["sweep"] == "s" and body["text"].startswith("Sweep 's'") for body in received)
    assert received[0]["text"] == "Sweep 's' started: 4 trials, 2 at a time" and received[0]["resumed"] is False
    assert [(body["trial"], body["value"]) for body in received[1:3]] == [(0, 2.0), (3, 1.2)]
    assert received[2]["text"] == "Sweep 's': new best trial 3, eval_loss=1.2 (training.learning_rate=0.001)"
    assert received[3]["line"] == cap[0]
    finished = received[4]
    assert finished["text"] == ("Sweep 's' finished in 61 s: best trial 3, eval_loss=1.2; 4 trials (3 completed, "
                                "1 pruned, 0 failed); cost $0.012300")
    assert (finished["best_trial"], finished["metric"], finished["value"]) == (3, "eval_loss", 1.2)
    assert finished["usd"] == 0.0123


def test_each_webhook_gets_only_its_events_and_a_stop_says_how_to_resume(answering_webhook):
    notifier = Notifier("s", book_with(), [webhook("notify.webhooks.0", answering_webhook.url, events=["stopped"])],
                        notify_section(), cap_line=lambda ended: None)
    notifier.sweep_started("4 trials", resumed=False)
    notifier.sweep_ended(finished_run(book_with((0, TrialState.RUNNING, None)), interrupted=True))
    [stopped] = answering_webhook.wait_for(1)
    assert stopped["event"] == "stopped" and stopped["resume"] == "sweep resume s"
    assert stopped["line"] == "Sweep stopped; continue it with: sweep resume s"
    assert stopped["text"] == "Sweep 's' stopped; continue it with: sweep resume s"


def test_a_broken_sweep_is_failed_with_its_line(answering_webhook, refusing_webhook):
    notifier = Notifier("s", book_with(), [webhook("notify.webhooks.0", answering_webhook.url),
                                           webhook("notify.webhooks.1", refusing_webhook)],
                        notify_section(attempts=1), cap_line=lambda ended: None)
    printed = []
    notifier.sweep_broke(UserError("tracking.uri: the MLflow store is on a full disk"),
                         SimpleNamespace(print=lambda line, **kwargs: printed.append(line)))
    [failed] = answering_webhook.wait_for(1)
    assert failed["event"] == "failed" and failed["line"] == "tracking.uri: the MLflow store is on a full disk"
    assert failed["text"].endswith("; continue it with: sweep resume s")
    assert printed == ["Notifications: 1 not delivered: notify.webhooks.1: failed (connection refused; 1 try)"]


def test_a_resumed_sweep_does_not_announce_its_old_best(answering_webhook):
    book = book_with((0, TrialState.COMPLETED, 1.0))
    notifier = Notifier("s", book, [webhook("notify.webhooks.0", answering_webhook.url)], notify_section(),
                        cap_line=lambda ended: None)
    notifier.sweep_started("4 trials", resumed=True)
    book.trials["t1"] = book_with((1, TrialState.COMPLETED, 3.0)).trials["t1"]
    notifier.trial_finished(book.trials["t1"])
    notifier.close()
    assert [body["event"] for body in answering_webhook.received] == ["started"]
    assert answering_webhook.received[0]["text"] == "Sweep 's' resumed: 4 trials"


# ---------------------------------------------------------------- the secret


def test_the_url_is_in_no_line_dump_or_pickle(tmp_path, refusing_webhook, capsys):
    raw = small_sweep("s", notify={"webhooks": [{"url": f"https://hooks.example.com/services/{SECRET}"},
                                                 {"url_env": "HOOK", "events": ["finished"]}]})
    spec = validate_spec(raw, base_dir=tmp_path)
    from sweeper.track._mlflow_store import flat_params

    dumps = [spec_to_yaml(spec), spec.model_dump_json(), repr(spec), str(spec), json.dumps(flat_params(spec)),
             pickle.dumps(spec).decode("latin-1")]  # Tune saves the tracker, which holds the spec, in tuner.pkl
    assert spec.model_copy(deep=True).notify.webhooks[0].url.get_secret_value().endswith(SECRET)
    webhooks, notes = resolve_webhooks(spec.notify, {"HOOK": refusing_webhook})
    notifier = Notifier("s", book_with(), webhooks, spec.notify, cap_line=lambda ended: None)
    dumps += [repr(webhooks), pickle.dumps(notifier).decode("latin-1")]
    notifier.sweep_started("4 trials", resumed=False)
    run = finished_run(book_with((0, TrialState.COMPLETED, 1.0)))
    notifier.sweep_ended(run)
    dumps += [*run.notes, *capsys.readouterr()]
    assert run.notes and all(SECRET not in text for text in dumps), [t for t in dumps if SECRET in t]
    # What a resumed sweep reads back holds the mask: that webhook is left out, with a note.
    stored = validate_spec(__import__("yaml").safe_load(spec_to_yaml(spec)), base_dir=tmp_path)
    webhooks, notes = resolve_webhooks(stored.notify, {"HOOK": refusing_webhook})
    assert [hook.key for hook in webhooks] == ["notify.webhooks.1 (url_env HOOK)"]
    assert notes == ["notify.webhooks.0: not notified: its url is a secret, not stored with the sweep; give the URL "
                     "in an environment variable (url_env) for a sweep that is resumed"]


# ---------------------------------------------------------------- the section's checks

runner = CliRunner()


def refused(tmp_path: Path, notify: dict, env: dict | None = None) -> list[str]:
    """`sweep validate` of a small sweep with `notify`: exit 2, no traceback; its error lines."""
    path = write_yaml(tmp_path / "s.yaml", small_sweep("s", notify=notify, output_dir=str(tmp_path / "sweeps" / "s")))
    result = runner.invoke(app, ["validate", str(path)], env=env)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return [line.removeprefix("error: ") for line in result.output.splitlines() if line.startswith("error:")]


def test_a_bad_scheme_is_keyed_without_the_url(tmp_path):
    lines = refused(tmp_path, {"webhooks": [{"url": f"ftp://hooks.example.com/{SECRET}"}]})
    assert lines == ["notify.webhooks.0.url: must be an http:// or https:// URL, got scheme 'ftp' (the URL itself is "
                     "not shown: it is a secret)"]


def test_an_unknown_event_names_the_valid_ones(tmp_path):
    hooks = [{"url_env": "HOOK", "events": ["finished", "done"]}]
    [line] = refused(tmp_path, {"webhooks": hooks}, {"HOOK": "https://h/x"})
    assert line.startswith("notify.webhooks.0.events.1: ") and "'done'" in line
    assert all(f"'{event}'" in line for event in NOTIFY_EVENTS)


def test_a_missing_variable_is_keyed_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.delenv("SWEEPER_TEST_HOOK", raising=False)
    lines = refused(tmp_path, {"webhooks": [{"url_env": "SWEEPER_TEST_HOOK"}]})
    assert lines == ["notify.webhooks.0.url_env: the environment variable SWEEPER_TEST_HOOK is not set or is empty; "
                     "export it with the webhook's URL, or remove this webhook"]
    assert not (tmp_path / "sweeps").exists()
    lines = refused(tmp_path, {"webhooks": [{"url_env": "SWEEPER_TEST_HOOK"}]},
                    {"SWEEPER_TEST_HOOK": f"hooks/{SECRET}"})
    assert lines == ["notify.webhooks.0.url_env: the URL in SWEEPER_TEST_HOOK must be an http:// or https:// URL, "
                     "got no scheme (the URL itself is not shown: it is a secret)"]


def test_url_or_url_env_and_a_typo_gets_the_nearest_key(tmp_path):
    assert refused(tmp_path, {"webhooks": [{"events": ["finished"]}]}) == [
        "notify.webhooks.0.url: give the URL in url or the name of an environment variable holding it in url_env "
        "(one of them)"]
    assert refused(tmp_path, {"webhooks": [{"url_evn": "HOOK"}]})[-1] == (
        "notify.webhooks.0.url_evn: unknown key; did you mean 'url_env'? valid keys: url, url_env, events")
