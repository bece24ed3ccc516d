"""The search: the space translated for Optuna, its sampler, the Tune searcher over an Optuna study,
ASHA by promotion (the default scheduler), warm starts from earlier sweeps, the study's
URL and attribute keys, and optuna-dashboard on it.

- `space`: our distributions -> Optuna's, and the sampler;
- `reports_so_far`: TPE reading a view of the study where the trials waiting at a rung
  count as pruned at their last report;
- `searcher`: `StepAwareOptunaSearch` and `make_search` (searcher, scheduler, concurrency);
- `study`: the study's file and URL, the attribute keys the searcher marks trials with;
- `asha`: `PromotionASHA` and its slot limiter;
- `tune_state`: the schedulers as the sweep uses them, which have Tune save its state
  before a new trial starts;
- `warm_start`: the search's `warm_start` (earlier sweeps' trials);
- `dashboard`: `sweep dashboard` (optuna-dashboard on the study).
"""

__all__ = ["space", "reports_so_far", "searcher", "study", "asha", "tune_state", "warm_start", "dashboard"]
