"""Search-space translation: `search.parameters` -> Optuna distributions and samplers.
Pure functions, no Ray: the launcher hands these to Ray Tune's OptunaSearch.

A categorical's `conditional` parameters are drawn define-by-run, after the trial's
fixed distributions, by `suggest_conditional`: only those of the value the trial drew.
Each has its own name in the study, `path|parent=value` (`trl.beta|trl.method=simpo`),
so that TPE models SimPO's beta apart from DPO's; `config_values` turns a trial's Optuna
params back into dotted config paths."""

from __future__ import annotations

import optuna

from sweeper.search._reports_so_far import ReportsSoFarSampler
from sweeper.spec import CategoricalDist, LogUniformDist, SearchSpec, SweepSpec, UniformDist, IntUniformDist, conditional_value

__all__ = [
    "to_optuna_distributions", "parameters_to_optuna", "make_sampler", "conditional_distributions",
    "suggest_conditional", "config_values", "optuna_space",
]

# Between a conditional parameter's path and the value it is searched under, in the study's names.
CONDITION_MARK = "|"


def to_optuna_distributions(spec: SweepSpec) -> dict[str, optuna.distributions.BaseDistribution]:
    """One Optuna distribution per dotted path. Integer bounds are inclusive, as in YAML."""
    return {path: _to_optuna(dist) for path, dist in spec.search.parameters.items()}


def parameters_to_optuna(parameters: dict[str, dict]) -> dict[str, optuna.distributions.BaseDistribution]:
    """The same for `search.parameters` as plain data (the YAML section, or the JSON a sweep
    recorded in MLflow), validated by the schema first."""
    search = SearchSpec.model_validate({"parameters": parameters})
    return {path: _to_optuna(dist) for path, dist in search.parameters.items()}


def conditional_distributions(spec: SweepSpec) -> dict[str, tuple[str, object, optuna.distributions.BaseDistribution]]:
    """Study name (`path|parent=value`) -> (parent path, parent value, Optuna distribution)
    of each conditional parameter, in the YAML's order."""
    conditional = {}
    for parent, dist in spec.search.parameters.items():
        for given, parameters in ((dist.conditional or {}).items() if isinstance(dist, CategoricalDist) else ()):
            value = conditional_value(dist, given)
            for path, nested in parameters.items():
                conditional[f"{path}{CONDITION_MARK}{parent}={value}"] = (parent, value, _to_optuna(nested))
    return conditional


def optuna_space(spec: SweepSpec) -> dict[str, optuna.distributions.BaseDistribution]:
    """Every distribution the study may hold, by its name there: the fixed ones and the
    conditional ones (a warm start rebuilds earlier trials on this)."""
    return {**to_optuna_distributions(spec), **{name: d for name, (_, _, d) in conditional_distributions(spec).items()}}


def suggest_conditional(trial: optuna.Trial, conditional: dict) -> None:
    """Draw on `trial` (asked with the fixed distributions) the conditional parameters of
    the values it drew, define-by-run through Optuna's public suggest API."""
    for name, (parent, value, dist) in conditional.items():
        if parent in trial.params and trial.params[parent] == value and type(trial.params[parent]) is type(value):
            _suggest(trial, name, dist)


def _suggest(trial: optuna.Trial, name: str, dist: optuna.distributions.BaseDistribution):
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_categorical(name, dist.choices)


def config_values(params: dict) -> dict:
    """A trial's Optuna params as dotted config paths (a conditional one's name less its condition)."""
    return {name.split(CONDITION_MARK, 1)[0]: value for name, value in params.items()}


def _to_optuna(dist) -> optuna.distributions.BaseDistribution:
    if isinstance(dist, LogUniformDist):
        return optuna.distributions.FloatDistribution(dist.low, dist.high, log=True)
    if isinstance(dist, UniformDist):
        return optuna.distributions.FloatDistribution(dist.low, dist.high)
    if isinstance(dist, IntUniformDist):
        return optuna.distributions.IntDistribution(dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDist):
        return optuna.distributions.CategoricalDistribution(dist.values)
    raise TypeError(f"unknown distribution {dist!r}")


def startup_trials(num_trials: int | None) -> int:
    """TPE's random startup trials: a quarter of the budget (at least 2, at most 10), so
    that TPE models the space on small sweeps too. A sweep that runs until a budget cap
    (no num_trials) gets the most, 10, as Optuna's own default: its trial count is not
    known when the sampler is made (the forecast's is a guess that a cap may undercut)."""
    if num_trials is None:
        return 10
    return max(2, min(10, num_trials // 4))


def make_sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for `search.method`, seeded by `search.seed`."""
    search = spec.search
    if search.method == "tpe":
        n_startup = startup_trials(search.num_trials)
        if search.num_trials is None:
            # Until a budget cap no rung closes and no trial is stopped as hopeless: TPE
            # learns from the trials waiting at a rung (sweeper/search/_reports_so_far.py).
            # With a count they reach it pruned soon enough, and reading trials at their
            # first report would rank early values beside full-length ones.
            return ReportsSoFarSampler(seed=search.seed, n_startup_trials=n_startup)
        # No constant liar (Optuna 5 defaults to it): see ReportsSoFarSampler.
        return optuna.samplers.TPESampler(seed=search.seed, n_startup_trials=n_startup, constant_liar=False)
    if search.method == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    grid = {path: list(dist.values) for path, dist in search.parameters.items()}
    return AskTellGridSampler(grid, seed=search.seed)


class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask-and-tell use. Its after_trial calls study.stop() when the grid
    is exhausted, which raises outside study.optimize(); here Tune stops the sweep after
    search.num_trials, which validation keeps within the grid size (a grid that runs until a
    budget cap: its size, see sweeper/search/_searcher.py)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None
