"""Report building from small synthetic frames: frames, importance, figures, HTML and
Markdown. No MLflow, no Ray (the real path is in tests/integration/test_reports.py)."""

from __future__ import annotations

import json
import re

import polars as pl
from pathlib import Path

import pytest

from reports import check_writable
from reports.build import build_report
from reports.data import SweepData
from reports.frames import best_so_far, best_trial_number, config_diff, cost_summary, leaderboard
from reports.html import render_html
from reports.importance import param_importance
from reports.markdown import render_markdown
from reports.static import write_pngs
from sweeper.errors import UserError
from sweeper.track._store import SweepRecord

SPACE = {
    "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1},
    "lora.r": {"distribution": "categorical", "values": [2, 4, 8]},
}
# trial number -> (state, status, final eval_loss, steps, cost, saved, learning rate, rank, ended s)
TRIALS = {
    1: ("completed", "completed", 2.0, 30, 0.30, 0.0, 1e-3, 8, 50),
    2: ("pruned", "pruned at step 10", 3.0, 10, 0.12, 0.20, 1e-4, 2, 20),
    3: ("completed", "completed", 1.5, 30, 0.31, 0.0, 1e-2, 4, 90),
    4: ("failed", "failed: out of memory", None, 0, 0.01, 0.0, 5e-2, 2, 95),
    5: ("completed", "completed", 1.8, 30, 0.29, 0.0, 3e-3, 2, 130),
    6: ("pruned", "pruned at step 20", 2.5, 20, 0.20, 0.10, 2e-4, 8, 110),
}


def make_record(name: str = "alpha", goal: str = "minimize", space: dict | None = None, **config) -> SweepRecord:
    return SweepRecord(
        name=name, run_id=f"run-{name}", status="finished", metric="eval_loss", goal=goal, max_steps=30,
        started_ms=1_000_000, ended_ms=1_200_000,
        config={"name": name, "training.max_steps": "30", "search.method": "tpe", "lora.dropout": "0.05", **config},
        search_space=SPACE if space is None else space, rungs=[10, 30 // 3 * 2],
        totals={"cost_usd_total": 1.23, "cost_usd_saved_by_pruning": 0.30, "accelerator_hours_total": 24.6,
                "tokens_total": 1e6, "usd_per_million_tokens": 1.23, "wall_seconds": 140.0},
        best_trial_id="t3", versions={"torch": "2.13.0", "ray": "2.60.0"},
        data_sha256={"train": "a" * 64, "eval": "b" * 64}, seeds={"training.seed": "0", "search.seed": "7"},
        reproducibility={"git commit": "abc123", "config hash": "h", "hardware": "x86_64", "accelerator": "cpu",
                         "USD per accelerator-hour": "0.05", "model": "builtin:tiny-llama", "sweep folder": "/s",
                         "MLflow run": f"run-{name}"},
    )


def make_sweep(name: str = "alpha", trials: dict = TRIALS, goal: str = "minimize", **record) -> SweepData:
    rows, history, params = [], [], []
    for number, (state, status, metric, steps, cost, saved, lr, rank, ended) in trials.items():
        values = {"training.learning_rate": str(lr), "lora.r": str(rank)}
        rows.append({
            "trial_number": number, "trial_id": f"t{number}", "run_id": f"r{number}", "state": state,
            "status": status, "run_status": "FINISHED", "steps": steps, "metric": metric, "cost_usd": cost,
            "wall_seconds": 10.0, "setup_seconds": 2.0, "tokens": 1000.0, "saved_usd": saved,
            "params": json.dumps(values), "started_ms": 1_000_000, "ended_ms": 1_000_000 + ended * 1000,
        })
        params.append({"trial_number": number, "training.learning_rate": lr, "lora.r": float(rank)})
        for step in range(10, steps + 1, 10):  # a falling curve that ends at the final metric
            history.append({"trial_number": number, "key": "eval_loss", "step": step, "value": metric + (steps - step) / 100})
    return SweepData(
        record=make_record(name, goal=goal, **record),
        trials=pl.DataFrame(rows),
        params=pl.DataFrame(params, schema={"trial_number": pl.Int64, "training.learning_rate": pl.Float64, "lora.r": pl.Float64}),
        history=pl.DataFrame(history, schema={"trial_number": pl.Int64, "key": pl.String, "step": pl.Int64, "value": pl.Float64}),
        best_config_yaml="name: alpha-best\ntraining:\n  learning_rate: 0.01\n",
    )


# ---------------------------------------------------------------- frames


def test_leaderboard_ranks_completed_by_metric_then_pruned_deepest_first():
    board = leaderboard(make_sweep())
    assert board["trial"].to_list() == [3, 5, 1, 6, 2, 4]
    assert board["rank"].to_list() == [1, 2, 3, 4, 5, 6]
    assert board.columns == ["rank", "trial", "status", "training.learning_rate", "lora.r", "eval_loss",
                             "best eval_loss seen", "steps", "cost", "state"]
    assert board.row(3, named=True)["status"] == "pruned at step 20"
    assert board.row(5, named=True)["eval_loss"] is None  # the failed trial reported nothing


def test_leaderboard_follows_a_maximize_goal():
    board = leaderboard(make_sweep(goal="maximize"))
    assert board["trial"].to_list()[:3] == [1, 5, 3]
    assert best_trial_number(make_sweep(goal="maximize")) == 1


def test_best_so_far_counts_only_completed_trials_and_adds_up_cost():
    frame = best_so_far(make_sweep())
    assert frame["trial_number"].to_list() == [2, 1, 3, 4, 6, 5]  # order of ending
    assert frame["cumulative_cost_usd"].to_list() == pytest.approx([0.12, 0.42, 0.73, 0.74, 0.94, 1.23])
    assert frame["wall_seconds"].to_list() == [20, 50, 90, 95, 110, 130]
    # Null until a trial completes; a pruned trial's early, lower value never counts.
    assert frame["best_so_far"].to_list() == [None, 2.0, 1.5, 1.5, 1.5, 1.5]


def test_cost_summary_uses_the_parent_totals_else_the_trials():
    data = make_sweep()
    costs = cost_summary(data)
    assert costs["cost_usd"] == 1.23 and costs["saved_by_pruning_usd"] == 0.30
    assert costs["without_pruning_usd"] == pytest.approx(1.53)
    assert costs["saved_share"] == pytest.approx(0.30 / 1.53)
    running = SweepData(_with_totals(data.record, {}), data.trials, data.params, data.history)
    assert cost_summary(running)["cost_usd"] == pytest.approx(sum(t[4] for t in TRIALS.values()))
    assert cost_summary(running)["saved_by_pruning_usd"] == pytest.approx(0.30)


def _with_totals(record: SweepRecord, totals: dict) -> SweepRecord:
    from dataclasses import replace

    return replace(record, totals=totals)


def test_config_diff_keeps_only_keys_that_differ():
    a = make_sweep("alpha")
    b = make_sweep("beta", **{"search.method": "random", "lora.dropout": "0.05"})
    diff = config_diff([a, b])
    assert diff.columns == ["key", "alpha", "beta"]
    assert diff.rows() == [("search.method", "tpe", "random")]  # not `name`, not the equal dropout


# ---------------------------------------------------------------- importance


def test_importance_from_completed_trials_with_two_evaluators():
    importance = param_importance(make_sweep().trials, SPACE, "minimize")
    assert importance.frame is not None, importance.note
    for _, rows in importance.frame.group_by("evaluator"):
        assert set(rows["parameter"]) == set(SPACE)
        assert rows["importance"].sum() == pytest.approx(1.0)
    assert set(importance.frame["evaluator"]) == {"fANOVA", "PED-ANOVA"}
    assert "3 completed trials" in importance.note


def test_importance_needs_enough_completed_trials_and_parameters():
    two_completed = {k: v for k, v in TRIALS.items() if k != 5}
    few = param_importance(make_sweep(trials=two_completed).trials, SPACE, "minimize")
    assert few.frame is None and few.note == "2 completed trial(s): importance needs at least 3."
    one = param_importance(make_sweep().trials, {"training.learning_rate": SPACE["training.learning_rate"]}, "minimize")
    assert one.frame is None and "1 parameter searched" in one.note


def test_importance_skips_values_outside_the_recorded_space():
    space = {**SPACE, "lora.r": {"distribution": "categorical", "values": [2, 4]}}  # trial 1 has r=8
    importance = param_importance(make_sweep().trials, space, "minimize")
    assert importance.frame is None and importance.note.startswith("2 completed trial(s)")


def test_importance_of_a_large_sweep_reads_a_seeded_sample_and_still_finds_what_matters():
    import math
    import random

    from reports.importance import MOST_TRIALS_EVALUATED

    rng = random.Random(1)
    many = {}
    for number in range(1, 2 * MOST_TRIALS_EVALUATED + 1):
        lr = 10 ** rng.uniform(-4, -1)
        # Only the learning rate matters: a valley at 1e-2.
        many[number] = ("completed", "completed", abs(math.log10(lr) + 2), 30, 0.3, 0.0, lr, rng.choice([2, 4, 8]), number)
    importance = param_importance(make_sweep(trials=many).trials, SPACE, "minimize")
    assert f"over {MOST_TRIALS_EVALUATED} of {2 * MOST_TRIALS_EVALUATED} completed trials (a seeded random sample; fANOVA with 16 trees)" in importance.note
    for _, rows in importance.frame.group_by("evaluator"):
        assert rows.sort("importance")["parameter"][-1] == "training.learning_rate", rows
    again = param_importance(make_sweep(trials=many).trials, SPACE, "minimize")
    assert again.frame.equals(importance.frame)  # the same sample, the same figures


# ---------------------------------------------------------------- figures


def test_figures_of_one_sweep():
    report = build_report([make_sweep()])
    sweep = report.sweeps[0]
    assert list(sweep.figures) == ["curves", "parallel", "importance", "progress", "cost"]
    curves = sweep.figures["curves"]
    assert len(curves.data) == 5  # every trial with a history (the failed one has none)
    pruned = [t for t in curves.data if "pruned" in t.name]
    assert len(pruned) == 2 and all(t.line.dash == "dash" for t in pruned)
    assert [t for t in curves.data if t.name.endswith("(best)")][0].name == "trial 3: completed (best)"
    assert sorted(shape.x0 for shape in curves.layout.shapes) == [10, 20]  # the ASHA rungs
    labels = [d.label for d in sweep.figures["parallel"].data[0].dimensions]
    assert labels == ["training.learning_rate (log scale)", "lora.r", "steps trained", "eval_loss"]
    learning_rate, rank = sweep.figures["parallel"].data[0].dimensions[:2]
    assert list(learning_rate.ticktext) == ["0.0001", "0.001", "0.01", "0.1"]
    assert list(rank.tickvals) == [2, 4, 8]
    assert {t.name for t in sweep.figures["importance"].data} == {"fANOVA", "PED-ANOVA"}
    assert [t.name for t in sweep.figures["cost"].data] == ["spent", "saved by pruning"]
    assert report.comparison is None


def test_the_curves_of_a_large_sweep_draw_the_best_one_by_one_and_the_rest_in_one_trace_per_state():
    from reports.figures import CURVES_OWN_TRACE

    many = {}
    for number in range(1, 61):
        completed = number % 3 == 0
        many[number] = ("completed" if completed else "pruned", "completed" if completed else "pruned at step 10",
                        1.0 + number / 100 if completed else 3.0, 30 if completed else 10, 0.3, 0.0, 1e-3, 4, number)
    curves = build_report([make_sweep(trials=many, best_trial_id="t3")]).sweeps[0].figures["curves"]
    own = [t for t in curves.data if t.name.startswith("trial ")]
    assert len(own) == CURVES_OWN_TRACE and own[0].name == "trial 3: completed (best)"
    # The 20 completed trials rank first, so none of the 40 pruned has its own trace.
    assert [t.name for t in curves.data if not t.name.startswith("trial ")] == ["40 other pruned trials"]
    assert len(curves.data) == CURVES_OWN_TRACE + 1


def test_a_large_sweeps_parallel_coordinates_draw_a_seeded_sample_and_its_bars_carry_no_text():
    from reports.figures import BARS_WITH_TEXT, PARALLEL_LINES

    many = {n: ("pruned", "pruned at step 10", 3.0 + n / 1000, 10, 0.1, 0.2, 1e-3, 4, n) for n in range(1, 2 * PARALLEL_LINES + 1)}
    figures = build_report([make_sweep(trials=many, best_trial_id=None)]).sweeps[0].figures
    parallel = figures["parallel"]
    assert len(parallel.data[0].dimensions[0].values) == PARALLEL_LINES
    assert f"{PARALLEL_LINES} of {2 * PARALLEL_LINES} trials, a seeded sample" in parallel.layout.title.text
    again = build_report([make_sweep(trials=many, best_trial_id=None)]).sweeps[0].figures["parallel"]
    assert again.data[0].dimensions[-1].values == parallel.data[0].dimensions[-1].values
    assert figures["cost"].data[0].textposition == "none" and 2 * PARALLEL_LINES > BARS_WITH_TEXT
    few = build_report([make_sweep()]).sweeps[0].figures
    assert few["cost"].data[0].textposition == "auto" and "sample" not in few["parallel"].layout.title.text


def test_comparison_of_two_sweeps():
    report = build_report([make_sweep("alpha"), make_sweep("beta", **{"search.method": "random"})])
    comparison = report.comparison
    assert comparison.best_trials["sweep"].to_list() == ["alpha", "beta"]
    assert comparison.best_trials["best trial"].to_list() == [3, 3]
    assert comparison.config_diff["key"].to_list() == ["search.method"]
    progress = comparison.figures["progress"]
    assert {t.name for t in progress.data} == {"alpha", "beta"} and len(progress.data) == 4  # 2 panels each
    assert [t.name for t in comparison.figures["best-curves"].data] == ["alpha: trial 3", "beta: trial 3"]
    assert list(report.all_figures())[:2] == ["comparison-progress", "comparison-best-curves"]
    assert report.title == "Sweep comparison: alpha vs beta"


def test_a_sweep_without_a_completed_trial_is_reported_with_a_note():
    trials = {k: v for k, v in TRIALS.items() if v[0] != "completed"}
    sweep = build_report([make_sweep(trials=trials, best_trial_id=None)]).sweeps[0]
    assert not sweep.has_completed_trial
    assert sweep.notes == [
        "Sweep 'alpha' has no completed trial (2 pruned, 1 failed): there is no best trial, best config or "
        "parameter importance; the tables and curves show what exists."
    ]
    assert "progress" not in sweep.figures and {"curves", "parallel", "cost"} <= set(sweep.figures)
    assert sweep.leaderboard.height == 3


# ---------------------------------------------------------------- HTML and Markdown


def test_html_is_self_contained_with_one_div_per_figure():
    report = build_report([make_sweep()])
    html = render_html(report)
    from plotly.offline import get_plotlyjs

    assert html.count(get_plotlyjs()) == 1  # plotly.js itself, once
    page = html.replace(get_plotlyjs(), "")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing loaded from elsewhere
    figure_ids = re.findall(r"data-figure='([^']+)'", html)
    assert figure_ids == list(report.all_figures())
    assert "pruned at step 20" in html and "a" * 64 in html and "2.13.0" in html


def test_markdown_holds_leaderboard_best_config_cost_and_images():
    report = build_report([make_sweep()])
    images = {slug: f"plots/{slug}.png" for slug in report.all_figures()}
    text = render_markdown(report, images)
    assert "| rank | trial | status | training.learning_rate | lora.r | eval_loss | best eval_loss seen | steps | cost |" in text
    assert "| 1 | 3 | completed | 0.01 | 4 | 1.5000 | 1.5000 | 30 | $0.310000 |" in text
    assert "| 6 | 4 | failed: out of memory | 0.05 | 2 | - | - | 0 | $0.010000 |" in text
    assert "```yaml\nname: alpha-best\ntraining:\n  learning_rate: 0.01\n```" in text
    assert "| total cost | $1.23 |" in text
    assert "| saved by pruning | $0.300000 (20% of the cost without pruning) |" in text
    assert "![alpha-curves](plots/alpha-curves.png)" in text
    assert "| data sha256: train | " + "a" * 64 + " |" in text and "| seed: search.seed | 7 |" in text
    assert "Best: trial 3, eval_loss = 1.5000 (training.learning_rate=0.01, lora.r=4)." in text


def test_markdown_without_static_images_says_so():
    report = build_report([make_sweep()])
    text = render_markdown(report, {}, "Static plots were not drawn (no browser).")
    assert "> Static plots were not drawn (no browser)." in text and "![" not in text


def test_markdown_cells_escape_pipes():
    trials = {1: ("failed", "failed: a | b", None, 0, 0.0, 0.0, 1e-3, 2, 5)}
    text = render_markdown(build_report([make_sweep(trials=trials, best_trial_id=None)]), {})
    assert "failed: a \\| b" in text


# ---------------------------------------------------------------- files


def test_unwritable_out_is_a_user_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UserError, match=r"^--out: cannot create .*a-file/report: .*a-file is a file; give a folder"):
        check_writable(blocker / "report")
    with pytest.raises(UserError, match=r"^--out: cannot create /proc/sweeper-report: /proc refuses new files"):
        check_writable(Path("/proc/sweeper-report"))
    # The probe leaves nothing: a report of a sweep that does not exist writes no folder.
    check_writable(tmp_path / "new" / "report")
    assert not (tmp_path / "new").exists()


def test_static_images_fall_back_to_a_note_without_a_browser(tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    report = build_report([make_sweep()])
    images, note = write_pngs(report.all_figures(), tmp_path / "plots", relative_to=tmp_path)
    assert images == {}
    assert note.startswith("Static plots were not drawn (") and "apt-get install chromium" in note
