"""The link's budgets on their own: caps, token buckets, the misbehaviour penalty, log lines."""

from __future__ import annotations

import logging

from trainer.server import link_budgets as budgets


def test_the_session_counter_caps_each_key_and_frees_on_close():
    counter = budgets.SessionCounter(
        budgets.LinkLimits(max_sessions_per_credential=2, max_sessions_per_peer=3, max_sessions=10)
    )
    assert counter.try_open("a", "h1") is None and counter.try_open("a", "h1") is None
    assert "sessions on this credential" in counter.try_open("a", "h1")
    assert counter.try_open("b", "h1") is None
    assert "sessions from h1" in counter.try_open("c", "h1")
    assert counter.open[""] == 3  # refusals took nothing
    counter.close("a", "h1")
    assert counter.try_open("a", "h2") is None


def test_a_rate_budget_lets_a_burst_through_then_asks_to_wait():
    budget = budgets.RateBudget(messages_per_s=10.0, bytes_per_s=1e9, burst_s=1.0)
    waits = [budget.charge(100) for _ in range(10)]
    assert waits == [0.0] * 10
    assert 0.05 < budget.charge(100) <= 0.11  # the 11th message: one tenth of a second later
    heavy = budgets.RateBudget(messages_per_s=1e6, bytes_per_s=1000.0, burst_s=1.0)
    assert 1.9 < heavy.charge(3000) <= 2.0  # 2000 bytes over budget at 1000 bytes/s


def test_misbehaviour_delays_the_next_session_from_the_same_key_only():
    penalties = budgets.Penalties(
        budgets.LinkLimits(bad_sessions_per_s=1.0, bad_bytes_per_s=1e9, burst_s=2.0)
    )
    for _ in range(2):
        penalties.charge("token@host", 10)
    assert penalties.delay_s("token@host") == 0.0  # within the allowance
    penalties.charge("token@host", 10)
    assert 0.5 < penalties.delay_s("token@host") <= 1.0
    assert penalties.delay_s("other@host") == 0.0


def test_a_log_budget_drops_past_its_burst_and_says_how_many(caplog):
    budget = budgets.LogBudget(logging.getLogger("budget-test"), burst=3, per_s=0.0)
    with caplog.at_level(logging.INFO, "budget-test"):
        written = [budget.info("line %d", i) for i in range(10)]
    assert written == [True] * 3 + [False] * 7 and budget.dropped == 7
    assert len(caplog.records) == 3
    assert budgets.clip_text("x" * 500, 10) == "'xxxxxxxxxx' (+490 chars)"
    assert budgets.clip_text("a\nb") == "'a\\nb'"
