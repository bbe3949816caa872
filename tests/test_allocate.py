"""Allocator: floors, weighted remainder, signals, water-filling and budget errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aether_context.errors import BudgetError
from aether_context.pipeline import Signals, allocate, distribute
from aether_context.pipeline.allocate import FLEX_LAYERS
from aether_context.profile import BudgetProfile, Floors, load_profile

DEFAULT = load_profile("default")


def test_floors_come_first():
    a = allocate(DEFAULT, 10_000, Signals(), {}, {})
    assert a.floors == {"system": 600, "task": 600, "tools": 400, "slack": 1200}
    assert a.remainder == 10_000 - 2_800
    assert a.slack == 1200
    assert a.pack_limit == 10_000 - 1200


@pytest.mark.parametrize("name", ["default", "research", "requirements", "test_construction", "coding_agent"])
@pytest.mark.parametrize("window", [8_192, 128_000, 1_048_576])
def test_nominal_is_remainder_times_weight_share(name, window):
    profile = load_profile(name)
    a = allocate(profile, window, Signals(), {}, {})
    f = profile.floors
    floors = int(window * f.system) + int(window * f.task) + int(window * f.tools) + int(window * f.slack)
    assert a.remainder == window - floors
    w = {"evidence": profile.weights.evidence.base, "memory": profile.weights.memory.base,
         "conversation": profile.weights.conversation.base}
    for k in FLEX_LAYERS:
        assert a.nominal[k] == int(a.remainder * w[k] / sum(w.values()))
        assert a.weights[k] == pytest.approx(w[k])
    assert sum(a.nominal.values()) <= a.remainder


def test_negative_remainder_is_a_budget_error():
    # a valid profile cannot get here (floors are checked to sum below 1); build one past validation
    bad = BudgetProfile.model_construct(floors=Floors.model_construct(system=0.5, task=0.4, tools=0.2, slack=0.1),
                                        weights=DEFAULT.weights, name="bad")
    with pytest.raises(BudgetError, match="exceed the window"):
        allocate(bad, 10_000, Signals(), {}, {})


@pytest.mark.parametrize("signal, layer", [
    ("checklist_evidence_ratio", "evidence"), ("expected_tool_calls", "evidence"), ("risk_weight", "evidence"),
    ("retrieval_hit_rate", "memory"), ("similarity", "memory"), ("freshness", "memory"),
    ("unresolved_questions", "conversation"), ("dialogue_depth", "conversation"),
])
def test_signals_move_weights(signal, layer):
    base = allocate(DEFAULT, 100_000, Signals(), {}, {})
    moved = allocate(DEFAULT, 100_000, Signals(**{signal: 5.0}), {}, {})
    coef = getattr(getattr(DEFAULT.weights, layer), signal)
    assert moved.weights[layer] == pytest.approx(base.weights[layer] + 5.0 * coef)
    assert moved.nominal[layer] > base.nominal[layer]
    others = [k for k in FLEX_LAYERS if k != layer]
    assert all(moved.nominal[k] <= base.nominal[k] for k in others)
    assert moved.signals.to_json()[signal] == 5.0
    assert moved.to_json()["signals"][signal] == 5.0


def test_negative_coefficients_clamp_weight_at_zero():
    profile = DEFAULT.override(weights={"conversation": {"base": 0.1, "unresolved_questions": -1.0}})
    a = allocate(profile, 10_000, Signals(unresolved_questions=3), {}, {})
    assert a.weights["conversation"] == 0.0
    assert a.nominal["conversation"] == 0


# ------------------------------------------------------------------------------------------------
# distribute (water-filling)
# ------------------------------------------------------------------------------------------------


def test_distribute_by_weight_when_all_want_more():
    out = distribute(1000, {"a": 1, "b": 3}, {"a": 10_000, "b": 10_000})
    assert out == {"a": 250, "b": 750}


def test_unused_budget_flows_to_other_layers():
    out = distribute(1000, {"a": 1, "b": 1, "c": 1}, {"a": 100, "b": 10_000, "c": 10_000})
    assert out["a"] == 100
    assert out["b"] + out["c"] == 900
    assert abs(out["b"] - out["c"]) <= 1


def test_zero_weight_layer_gets_leftovers():
    out = distribute(1000, {"a": 1, "b": 0}, {"a": 300, "b": 10_000})
    assert out == {"a": 300, "b": 700}


def test_all_satisfied_leaves_the_rest_unspent():
    out = distribute(1000, {"a": 1, "b": 1}, {"a": 100, "b": 200})
    assert out == {"a": 100, "b": 200}


def test_zero_demands_and_zero_total():
    assert distribute(1000, {"a": 1}, {"a": 0}) == {"a": 0}
    assert distribute(0, {"a": 1, "b": 1}, {"a": 10, "b": 10}) == {"a": 0, "b": 0}
    assert distribute(1000, {}, {}) == {}


def test_rounding_dust_is_not_lost():
    out = distribute(7, {"a": 1, "b": 1, "c": 1}, {"a": 100, "b": 100, "c": 100})
    assert sum(out.values()) == 7


def test_distribute_is_deterministic_and_order_free():
    w = {"evidence": 0.4, "memory": 0.2, "conversation": 0.4}
    d = {"evidence": 5000, "memory": 123, "conversation": 9999}
    first = distribute(7777, w, d)
    assert distribute(7777, w, d) == first
    assert distribute(7777, dict(reversed(list(w.items()))), dict(reversed(list(d.items())))) == first


@settings(max_examples=150, deadline=None)
@given(total=st.integers(0, 200_000),
       weights=st.lists(st.floats(0, 10, allow_nan=False), min_size=3, max_size=3),
       demands=st.lists(st.integers(0, 100_000), min_size=3, max_size=3))
def test_distribute_properties(total, weights, demands):
    names = ("evidence", "memory", "conversation")
    w, d = dict(zip(names, weights)), dict(zip(names, demands))
    out = distribute(total, w, d)
    assert set(out) == set(names)
    assert sum(out.values()) <= total
    assert all(0 <= out[k] <= d[k] for k in names)
    # nothing sits idle while a layer still wants more
    assert sum(out.values()) == min(total, sum(d.values()))
    assert distribute(total, w, d) == out


# ------------------------------------------------------------------------------------------------
# fixed layers and final budgets
# ------------------------------------------------------------------------------------------------


def test_flexible_budgets_fill_the_pack_limit():
    fixed = {"system": 300, "task": 200, "tools": 100}
    demands = {"evidence": 500, "memory": 100_000, "conversation": 100_000}
    a = allocate(DEFAULT, 10_000, Signals(), fixed, demands)
    flex = sum(a.budgets[k] for k in FLEX_LAYERS)
    assert flex == a.pack_limit - 600
    assert a.budgets["evidence"] == 500  # satisfied, the rest flowed on
    assert a.budgets["system"] == 300 and a.budgets["task"] == 200 and a.budgets["tools"] == 100


def test_spare_goes_to_conversation():
    a = allocate(DEFAULT, 10_000, Signals(), {"system": 100}, {"evidence": 10, "memory": 10, "conversation": 10})
    assert a.budgets["evidence"] == 10 and a.budgets["memory"] == 10
    assert a.budgets["conversation"] == a.pack_limit - 100 - 20


def test_fixed_layers_above_floors_take_from_remainder():
    small = allocate(DEFAULT, 10_000, Signals(), {"system": 100, "task": 100, "tools": 100},
                     {k: 100_000 for k in FLEX_LAYERS})
    big = allocate(DEFAULT, 10_000, Signals(), {"system": 3_000, "task": 100, "tools": 100},
                   {k: 100_000 for k in FLEX_LAYERS})
    assert big.floors == small.floors
    assert sum(big.budgets[k] for k in FLEX_LAYERS) == 10_000 - 1200 - 3_200
    assert sum(big.budgets[k] for k in FLEX_LAYERS) < big.remainder
    assert sum(small.budgets[k] for k in FLEX_LAYERS) - sum(big.budgets[k] for k in FLEX_LAYERS) == 2_900
    assert big.budgets["system"] == 3_000


def test_fixed_layers_bigger_than_window_less_slack():
    with pytest.raises(BudgetError) as info:
        allocate(DEFAULT, 10_000, Signals(), {"system": 5_000, "task": 3_000, "tools": 1_000}, {})
    message = str(info.value)
    assert "split the step" in message
    assert "9000" in message and "8800" in message


def test_fixed_layers_exactly_filling_is_allowed():
    a = allocate(DEFAULT, 10_000, Signals(), {"system": 8_800}, {k: 10 for k in FLEX_LAYERS})
    assert all(a.budgets[k] == 0 for k in FLEX_LAYERS)


def test_allocation_json_round_numbers():
    a = allocate(DEFAULT, 10_000, Signals(risk_weight=0.5), {"system": 10}, {"evidence": 10})
    data = a.to_json()
    assert data["window"] == 10_000 and data["slack"] == 1200
    assert set(data["nominal"]) == set(FLEX_LAYERS)
    assert data["signals"]["risk_weight"] == 0.5
