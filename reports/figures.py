"""Report figures: frames in, plotly figures out (the HTML embeds them, the Markdown gets
static PNGs of the same figures). A builder returns None when there is nothing to draw."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from reports.data import SweepData
from reports.frames import best_so_far, best_trial_number, leaderboard, number
from sweeper.names import TrialState

__all__ = [
    "curves_figure", "parallel_figure", "importance_figure", "progress_figure", "cost_figure", "front_figure",
    "best_curves_figure", "forecast_figure",
]

TEMPLATE = "plotly_white"
PALETTE = qualitative.Plotly
PRUNED_COLOR = "#9a9a9a"
FAILED_COLOR = "#d62728"


def _layout(fig: go.Figure, title: str, top: int = 70, left: int = 70, **axes) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=460, margin=dict(l=left, r=30, t=top, b=60), **axes)
    return fig


# Past this many trials with a history, the curves figure draws the CURVES_OWN_TRACE best
# one by one and every other trial in one trace per state (a 2,000-trial sweep would
# otherwise have 2,000 legend entries and traces for the browser to draw).
CURVES_OWN_TRACE = 20


def curves_figure(data: SweepData) -> go.Figure | None:
    """The metric of every trial against step: completed trials solid (the best thick),
    pruned ones grey and dashed, ending in a cross; ASHA rung steps as dotted lines. In a
    sweep of more than CURVES_OWN_TRACE trials, the rest share one trace per state."""
    if data.history.is_empty():
        return None
    metric, best = data.record.metric, best_trial_number(data)
    trials = {row["trial_number"]: row for row in data.trials.iter_rows(named=True)}
    histories = list(data.history.sort("step").group_by("trial_number", maintain_order=True))
    own = {number_ for (number_,), _ in histories}
    if len(histories) > CURVES_OWN_TRACE:  # the leaderboard's first, those with a history
        own = set([number_ for number_ in leaderboard(data)["trial"].to_list() if number_ in own][:CURVES_OWN_TRACE])
    fig = go.Figure()
    shared: dict[str, tuple[list, list, int]] = {}  # state -> (steps, values, trials), None between trials
    for index, ((number_,), points) in enumerate(histories):
        trial = trials[number_]
        state = trial["state"]
        if number_ not in own:
            steps, values, count = shared.get(state, ([], [], 0))
            shared[state] = ([*steps, *points["step"].to_list(), None], [*values, *points["value"].to_list(), None], count + 1)
            continue
        line = dict(color=PALETTE[index % len(PALETTE)], width=2)
        marker = dict(size=6)
        if state == TrialState.PRUNED:
            line.update(color=PRUNED_COLOR, dash="dash")
            marker = dict(size=[6] * (points.height - 1) + [12], symbol=["circle"] * (points.height - 1) + ["x"])
        elif state == TrialState.FAILED:
            line.update(color=FAILED_COLOR, dash="dot")
        if number_ == best:
            line["width"] = 5
        fig.add_trace(go.Scatter(
            x=points["step"].to_list(), y=points["value"].to_list(), mode="lines+markers", line=line, marker=marker,
            name=f"trial {number_}: {trial['status']}" + (" (best)" if number_ == best else ""),
            opacity=0.75 if state == TrialState.PRUNED else 1.0,
            hovertemplate=f"trial {number_} ({trial['status']})<br>step %{{x}}<br>{metric} %{{y:.4f}}<extra></extra>",
        ))
    for state, (steps, values, count) in shared.items():
        color = FAILED_COLOR if state == TrialState.FAILED else PRUNED_COLOR
        fig.add_trace(go.Scatter(
            # Markers too: a trial pruned at its first evaluation has one point, no line.
            x=steps, y=values, mode="lines+markers", marker=dict(size=4), connectgaps=False, opacity=0.35,
            line=dict(color=color, width=1, dash="dash" if state == TrialState.PRUNED else "solid"),
            name=f"{count} other {state} trials",
            hovertemplate=f"{state}<br>step %{{x}}<br>{metric} %{{y:.4f}}<extra></extra>",
        ))
    for rung in data.record.rungs:
        fig.add_vline(x=rung, line=dict(color="#555", dash="dot", width=1),
                      annotation_text=f"ASHA rung {rung}", annotation_position="top")
    return _layout(fig, f"{data.name}: {metric} by training step (grey dashed: pruned; dotted lines: ASHA rungs)",
                   xaxis_title="step", yaxis_title=metric, legend_title_text="trial")


# The most lines the parallel coordinates draw: past it, a seeded random sample of the
# trials (the figure's title says so). Drawing 2,000 lines took Chromium 8.5 s for the
# report's PNG; the spread of the lines shows as well with 300.
PARALLEL_LINES = 300


def parallel_figure(data: SweepData) -> go.Figure | None:
    """Parallel coordinates: each searched parameter, steps trained and the metric, one line
    per trial with a metric (past PARALLEL_LINES of them, a seeded sample), coloured by
    the metric."""
    metric = data.record.metric
    frame = data.trials.select("trial_number", "steps", "metric").join(data.params, on="trial_number")
    frame = frame.filter(pl.col("metric").is_not_null())
    if frame.is_empty() or not data.param_names:
        return None
    sampled = ""
    if frame.height > PARALLEL_LINES:
        sampled = f"; {PARALLEL_LINES} of {frame.height} trials, a seeded sample"
        frame = frame.sample(PARALLEL_LINES, seed=0).sort("trial_number")
    dimensions = [_dimension(name, frame[name], data.record.search_space.get(name, {})) for name in data.param_names]
    dimensions.append(dict(label="steps trained", values=frame["steps"].to_list()))
    dimensions.append(dict(label=metric, values=frame["metric"].to_list()))
    fig = go.Figure(go.Parcoords(
        line=dict(color=frame["metric"].to_list(), colorscale="Viridis", reversescale=data.record.minimize,
                  showscale=True, colorbar=dict(title=dict(text=metric))),
        dimensions=dimensions,
    ))
    return _layout(fig, f"{data.name}: parameters against {metric} (bright = better{sampled})", top=120, left=110)


def _dimension(name: str, values: pl.Series, distribution: dict) -> dict:
    if values.dtype == pl.String:  # categorical values that are not numbers
        choices = [str(v) for v in distribution.get("values", [])] or sorted(values.drop_nulls().unique().to_list())
        index = {choice: i for i, choice in enumerate(choices)}
        return dict(label=name, values=[index.get(v) for v in values], tickvals=list(index.values()),
                    ticktext=choices, range=[0, max(len(choices) - 1, 1)])
    low, high = distribution.get("low"), distribution.get("high")
    if distribution.get("distribution") == "log_uniform" or distribution.get("log"):
        low = low or values.min()
        high = high or values.max()
        decades = [10.0**k for k in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)]
        ticks = sorted({low, *decades, high})  # the bounds and every power of ten between
        return dict(label=f"{name} (log scale)", values=[math.log10(v) for v in values],
                    range=[math.log10(low), math.log10(high)], tickvals=[math.log10(t) for t in ticks],
                    ticktext=[number(t) for t in ticks])
    dimension = dict(label=name, values=values.to_list())
    if low is not None and high is not None:
        dimension["range"] = [low, high]
    choices = distribution.get("values") or []
    if choices and all(isinstance(v, (int, float)) for v in choices):  # numeric categorical: one tick each
        choices = sorted(float(v) for v in choices)
        dimension.update(tickvals=choices, ticktext=[number(v) for v in choices], range=[choices[0], choices[-1]])
    return dimension


def importance_figure(data: SweepData, importance: pl.DataFrame | None) -> go.Figure | None:
    if importance is None or importance.is_empty():
        return None
    fig = go.Figure()
    for index, ((evaluator,), rows) in enumerate(importance.group_by("evaluator", maintain_order=True)):
        rows = rows.sort("importance")
        fig.add_trace(go.Bar(x=rows["importance"].to_list(), y=rows["parameter"].to_list(), orientation="h",
                             name=evaluator, marker_color=PALETTE[index % len(PALETTE)]))
    fig.update_layout(barmode="group")
    return _layout(fig, f"{data.name}: parameter importance for {data.record.metric} (Optuna)", left=180,
                   xaxis_title="importance (share, per evaluator)", xaxis_range=[0, 1])


def progress_figure(sweeps: list[SweepData]) -> go.Figure | None:
    """Best completed metric so far against cumulative cost and against wall time, one
    line per sweep; every ended trial is a point (hover: which and how it ended)."""
    frames = [best_so_far(data) for data in sweeps]
    if all(frame["best_so_far"].is_null().all() for frame in frames):
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("against cumulative cost", "against wall time"),
                        horizontal_spacing=0.1)
    for index, (data, frame) in enumerate(zip(sweeps, frames)):
        text = [f"trial {n} ({s})" for n, s in zip(frame["trial_number"], frame["state"])]
        color = PALETTE[index % len(PALETTE)]
        marker = dict(size=8, color=[color if state == TrialState.COMPLETED else PRUNED_COLOR for state in frame["state"]])
        for column, x in enumerate((frame["cumulative_cost_usd"], frame["wall_seconds"]), start=1):
            fig.add_trace(go.Scatter(
                x=x.to_list(), y=frame["best_so_far"].to_list(), mode="lines+markers", line_shape="hv",
                line=dict(color=color), marker=marker, name=data.name, legendgroup=data.name, showlegend=column == 1, text=text,
                hovertemplate="%{text}<br>x %{x:.4g}<br>best so far %{y:.4f}<extra>" + data.name + "</extra>",
            ), row=1, col=column)
    fig.update_xaxes(title_text="cumulative cost (USD)", row=1, col=1)
    fig.update_xaxes(title_text="wall time since the sweep started (s)", row=1, col=2)
    fig.update_yaxes(title_text=f"best {sweeps[0].record.metric} so far", row=1, col=1)
    names = ", ".join(data.name for data in sweeps)
    fig.update_xaxes(tickprefix="$", tickformat=".3~g", row=1, col=1)
    return _layout(fig, f"{names}: best completed {sweeps[0].record.metric} so far (grey points: trials that did not complete)")


BARS_WITH_TEXT = 50


def cost_figure(data: SweepData) -> go.Figure | None:
    """Per trial: what it cost, and on top (pruned trials) what pruning saved."""
    trials = data.trials.filter(pl.col("cost_usd").is_not_null())
    if trials.is_empty():
        return None
    labels = [f"trial {n}" for n in trials["trial_number"]]
    # Each bar says how its trial ended, while there is room to read it; past that the
    # words are only in the hover (a 2,000-bar figure's texts slowed the report's PNG).
    text_on_bars = "auto" if trials.height <= BARS_WITH_TEXT else "none"
    fig = go.Figure([
        go.Bar(x=labels, y=trials["cost_usd"].to_list(), name="spent", marker_color=PALETTE[0],
               text=trials["status"].to_list(), textposition=text_on_bars,
               hovertemplate="%{x}: %{text}<br>spent $%{y:.6f}<extra></extra>"),
        go.Bar(x=labels, y=trials["saved_usd"].fill_null(0).to_list(), name="saved by pruning",
               marker_color="#b8e0b8", hovertemplate="%{x}<br>saved $%{y:.6f}<extra></extra>"),
    ])
    fig.update_layout(barmode="stack")
    return _layout(fig, f"{data.name}: cost per trial (USD), and what pruning saved", yaxis_title="USD",
                   yaxis_tickprefix="$", yaxis_tickformat=".3~g")


def front_figure(data: SweepData) -> go.Figure | None:
    """search.objectives: every completed trial by its first two objectives, the Pareto
    front's trials marked and joined."""
    front = data.front
    if front is None or not front.points:
        return None
    numbers = dict(zip(data.trials["trial_id"], data.trials["trial_number"]))
    on_front = set(front.front)
    others = [(t, v) for t, v in front.points if t not in on_front]
    best = sorted(((t, v) for t, v in front.points if t in on_front), key=lambda p: p[1][0])
    x_name, y_name = front.metrics[0], front.metrics[1]
    fig = go.Figure()
    for points, name, color, mode in ((others, "dominated", "#b0b0b0", "markers"), (best, "Pareto front", PALETTE[0], "lines+markers")):
        fig.add_trace(go.Scatter(
            x=[v[0] for _, v in points], y=[v[1] for _, v in points], mode=mode, name=name, marker_color=color,
            text=[f"trial {numbers.get(t, t)}" for t, _ in points], marker_size=9,
            hovertemplate="%{text}<br>" + x_name + " %{x:.4g}<br>" + y_name + " %{y:.4g}<extra></extra>",
        ))
    return _layout(fig, f"{data.name}: Pareto front of {x_name} ({front.goals[0]}) and {y_name} ({front.goals[1]})",
                   xaxis_title=x_name, yaxis_title=y_name)


def forecast_figure(data: SweepData) -> go.Figure | None:
    """The live forecast over the sweep's life against what happened: the total dollars it
    expected, and the time it said was left, at each evaluation (x: seconds since the
    trials began). None before the sweep has ended or without a live forecast."""
    from sweeper.names import LiveForecastKey as Key, RunMetric

    frame, totals = data.forecast, data.record.totals
    if frame is None or frame.is_empty() or RunMetric.COST_USD_TOTAL not in totals or RunMetric.WALL_SECONDS not in totals:
        return None
    frame = frame.drop_nulls()
    elapsed = frame[Key.ELAPSED_SECONDS].to_list()
    actual_usd, actual_wall = totals[RunMetric.COST_USD_TOTAL], totals[RunMetric.WALL_SECONDS]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("total cost (USD)", "time left (s)"))
    fig.add_trace(go.Scatter(x=elapsed, y=frame[Key.TOTAL_USD].to_list(), mode="lines+markers", name="live forecast",
                             marker_color=PALETTE[0], legendgroup="forecast"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0, actual_wall], y=[actual_usd, actual_usd], mode="lines", name="actual",
                             line=dict(color=PALETTE[1], dash="dash"), legendgroup="actual"), row=1, col=1)
    fig.add_trace(go.Scatter(x=elapsed, y=frame[Key.REMAINING_SECONDS].to_list(), mode="lines+markers",
                             name="live ETA", marker_color=PALETTE[0], legendgroup="forecast", showlegend=False), row=1, col=2)
    fig.add_trace(go.Scatter(x=[0, actual_wall], y=[actual_wall, 0], mode="lines", name="actual time left",
                             line=dict(color=PALETTE[1], dash="dash"), legendgroup="actual", showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="seconds since the trials began")
    fig.update_yaxes(tickprefix="$", tickformat=".3~g", row=1, col=1)
    return _layout(fig, f"{data.name}: the live forecast at each evaluation against the actual", top=90)


def best_curves_figure(sweeps: list[SweepData]) -> go.Figure | None:
    """The best trial of each sweep, side by side on one axis."""
    fig = go.Figure()
    for index, data in enumerate(sweeps):
        best = best_trial_number(data)
        points = data.history.filter(pl.col("trial_number") == best).sort("step")
        if best is None or points.is_empty():
            continue
        fig.add_trace(go.Scatter(x=points["step"].to_list(), y=points["value"].to_list(), mode="lines+markers",
                                 name=f"{data.name}: trial {best}", line=dict(color=PALETTE[index % len(PALETTE)], width=3)))
    if not fig.data:
        return None
    return _layout(fig, f"Best trial of each sweep: {sweeps[0].record.metric} by step", xaxis_title="step",
                   yaxis_title=sweeps[0].record.metric)
