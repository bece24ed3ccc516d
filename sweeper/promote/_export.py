"""Export: one trial of a sweep as a standalone YAML that trains its config as a single
full run (`sweep export NAME [--trial ID] -o train.yaml`, then `sweep start train.yaml`)."""

from __future__ import annotations

from sweeper.names import Tag
from sweeper.spec import spec_to_yaml
from sweeper.track import SweepStore
from trainables.metrics import EVAL_LOSS

__all__ = ["export_trial"]


def export_trial(store: SweepStore, sweep: str, trial_ref: str | None = None) -> str:
    """The YAML text: the sweep's config with the trial's values, nothing searched or
    stopped early; the best trial when `trial_ref` is None."""
    parent = store.sweep_run(sweep)
    trial = store.trial(parent, trial_ref)
    metric = parent.data.tags.get(Tag.METRIC, EVAL_LOSS)
    value = f"{trial['metric']:.6g}" if trial["metric"] is not None else "none"
    header = (
        f"# Trial {trial['trial_number']} of sweep {sweep!r} ({trial['status']}, {metric}={value}) "
        "as one full run.\n# Run it with: sweep start <this file>\n"
    )
    return header + spec_to_yaml(store.trial_spec(parent, trial))
