"""The search: the space translated for Optuna (`parameters_to_optuna`), the Tune searcher
over an Optuna study and the scheduler (`make_search`), ASHA by promotion (the default
scheduler, `PromotionASHA`), warm starts from earlier sweeps (`read_warm_start`), the
study's file, URL and attribute keys (`study_url`, ...), optuna-dashboard on it
(`study_dashboard`, `serve`), and a multi-objective sweep's Pareto front (`study_front`).

The private modules: `_space` (our distributions -> Optuna's, and the sampler),
`_reports_so_far` (TPE reading a view of the study where the trials waiting at a rung
count as pruned at their last report), `_searcher` (`StepAwareOptunaSearch`), `_study` (with the dashboard),
`_asha` (`PromotionASHA` and its slot limiter), `_tune_state` (the schedulers as the sweep
uses them, which have Tune save its state before a new trial starts), `_warm_start`,
`_mirrored_storage` (the study read from memory, written through to its SQLite file),
`_objectives` (several objectives: the values told to the study, the cost objectives, the front).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "parameters_to_optuna", "startup_trials", "make_search", "optuna_searcher", "PromotionASHA",
    "SlotLimiter", "read_warm_start", "STARTUP_ATTR", "STUDY_FILE", "TUNE_TRIAL_ID_ATTR", "WARM_START_ATTR",
    "study_file", "study_url", "study_dashboard", "serve",
    "Front", "study_front",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "parameters_to_optuna": "_space", "startup_trials": "_space",
    "make_search": "_searcher", "optuna_searcher": "_searcher",
    "PromotionASHA": "_asha", "SlotLimiter": "_asha",
    "read_warm_start": "_warm_start",
    "STARTUP_ATTR": "_study", "STUDY_FILE": "_study", "TUNE_TRIAL_ID_ATTR": "_study",
    "WARM_START_ATTR": "_study", "study_file": "_study", "study_url": "_study",
    "study_dashboard": "_study", "serve": "_study",
    "Front": "_objectives",
    "study_front": "_objectives",
}

__getattr__ = lazy_getattr(__name__, _HOME)
