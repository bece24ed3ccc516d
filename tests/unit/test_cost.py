import pytest

from sweeper.cost._prices import PRICE_TABLE, price_per_hour, pruning_saving, sweep_cost, trial_cost
from tests.conftest import REPO


def test_trial_cost_is_accelerator_hours_times_price():
    cost = trial_cost(wall_seconds=1800, accelerators=4, usd_per_hour=3.0, tokens=2_000_000)
    assert cost.accelerator_hours == 2.0
    assert cost.usd == 6.0
    assert cost.usd_per_million_tokens == 3.0


def test_domain_example_7b_lora_on_one_a100_for_four_hours():
    assert trial_cost(4 * 3600, 1, price_per_hour("a100-80gb", None, {}), 0).usd == pytest.approx(12.0)


def test_price_lookup_overrides():
    assert price_per_hour("h100", None, {}) == PRICE_TABLE["h100"] == 5.0
    assert price_per_hour("h100", None, {"h100": 2.5}) == 2.5
    assert price_per_hour("mine", None, {"mine": 1.25}) == 1.25
    assert price_per_hour("h100", 9.0, {"h100": 2.5}) == 9.0


def test_pruning_saving_projects_the_full_budget_at_the_measured_rate():
    # 10 s setup, then 10 of 100 steps in 20 s (2 s/step): the full run would have taken
    # 10 + 200 = 210 s; it used 30 s, so 180 s were saved, on 2 GPUs at $3/h.
    saved = pruning_saving(wall_seconds=30, setup_seconds=10, steps_done=10, max_steps=100, accelerators=2, usd_per_hour=3.0)
    assert saved == pytest.approx(180 / 3600 * 2 * 3.0)
    assert pruning_saving(30, 10, 100, 100, 2, 3.0) == 0.0  # ran its whole budget
    assert pruning_saving(30, 10, 0, 100, 2, 3.0) == 0.0  # never reported


def test_sweep_totals():
    trials = [trial_cost(3600, 1, 2.0, 1000), trial_cost(1800, 1, 2.0, 500)]
    totals = sweep_cost(trials, [0.5, 0.25])
    assert (totals.usd, totals.accelerator_hours, totals.tokens, totals.saved_by_pruning_usd) == (3.0, 1.5, 1500, 0.75)
    assert totals.usd_per_million_tokens == pytest.approx(2000.0)


def test_a_gpu_sweep_is_priced_by_the_card_the_cluster_reports():
    """The Qwen sweeps name an A10G; run on H100s, they are priced as H100s, and say so."""
    from sweeper.cost._prices import priced_on_cluster, sweep_rate
    from sweeper.spec._load import load_spec

    spec = load_spec(REPO / "search_spaces" / "qwen2.5-0.5b-lora-sft.yaml")
    assert sweep_rate(spec).usd_per_hour == PRICE_TABLE["a10g"]
    priced, line = priced_on_cluster(spec, {"H100"})
    assert sweep_rate(priced).usd_per_hour == PRICE_TABLE["h100"] == 5.0 and priced.cost.accelerator == "h100"
    assert line.startswith("Cost: priced as h100 at 5 USD per GPU-hour, the cluster's GPUs (cost.accelerator is a10g")
    # Unchanged: the card it names, an unknown or mixed cluster, a price the sweep fixes, a CPU sweep.
    for types in ({"A10G"}, set(), {"T4"}, {"H100", "A10G"}):
        assert priced_on_cluster(spec, types) == (spec, None), types
    fixed = spec.model_copy(update={"cost": spec.cost.model_copy(update={"usd_per_hour": 1.2})})
    assert priced_on_cluster(fixed, {"H100"}) == (fixed, None)
    a100 = spec.model_copy(update={"cost": spec.cost.model_copy(update={"accelerator": "a100-40gb"})})
    assert priced_on_cluster(a100, {"A100"}) == (a100, None)
    cpu = spec.model_copy(update={"resources": spec.resources.model_copy(update={"use_gpu": False, "gpus_per_worker": 0})})
    assert priced_on_cluster(cpu, {"H100"}) == (cpu, None)


def test_the_clusters_cards_are_read_from_its_live_nodes(monkeypatch):
    import ray

    from sweeper.cost._memory import cluster_accelerator_types

    nodes = [
        {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0, "accelerator_type:H100": 1.0}},
        {"Alive": False, "Resources": {"GPU": 1.0, "accelerator_type:A10G": 1.0}},
        {"Alive": True, "Resources": {"CPU": 4.0}},
    ]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert cluster_accelerator_types() == {"H100"}
