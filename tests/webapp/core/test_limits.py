"""The in-process limiter: sliding one-minute windows, concurrency slots, all-or-nothing admission."""

from __future__ import annotations

import pytest

from webapp.core.errors import InvalidRequest, RateLimited
from webapp.core.limits import Limits, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_window() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    checks = [("k", Limits(requests_per_minute=2))]
    limiter.admit(checks)
    clock.now += 10
    limiter.admit(checks)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks)
    assert info.value.status == 429 and info.value.retry_after == 50
    clock.now += 50
    limiter.admit(checks)


def test_tokens_per_minute_retry_after() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    checks = [("k", Limits(tokens_per_minute=100))]
    a = limiter.admit(checks)
    limiter.add_tokens(a, 80)
    clock.now += 30
    b = limiter.admit(checks)
    limiter.add_tokens(b, 40)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks)
    assert info.value.code == "tokens_per_minute" and info.value.retry_after == 30
    clock.now += 30
    limiter.admit(checks)


def test_concurrency_and_release() -> None:
    limiter = RateLimiter(Clock())
    checks = [("k", Limits(max_concurrent_requests=1))]
    first = limiter.admit(checks)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks)
    assert info.value.retry_after == 1
    limiter.release(first)
    limiter.release(first)  # idempotent per bucket floor: never below zero
    limiter.admit(checks)


def test_admission_is_all_or_nothing() -> None:
    limiter = RateLimiter(Clock())
    key, user = ("key", 1), ("user", 1)
    limiter.admit([(user, Limits(requests_per_minute=1))])
    with pytest.raises(RateLimited):
        limiter.admit([(key, Limits(requests_per_minute=1)), (user, Limits(requests_per_minute=1))])
    limiter.admit([(key, Limits(requests_per_minute=1))])  # the key was not charged by the failed attempt


def test_zero_limit_always_refuses() -> None:
    with pytest.raises(RateLimited) as info:
        RateLimiter(Clock()).admit([("k", Limits(requests_per_minute=0))])
    assert info.value.retry_after == 60


def test_sequences_count_against_concurrency() -> None:
    limiter = RateLimiter(Clock())
    checks = [("k", Limits(max_concurrent_requests=4))]
    three = limiter.admit(checks, weight=3)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks, weight=2)  # 3 + 2 > 4
    assert info.value.code == "concurrent_requests"
    one = limiter.admit(checks)
    limiter.release(three)
    limiter.admit(checks, weight=3)
    limiter.release(one)


def test_more_sequences_than_the_cap_is_a_client_error() -> None:
    # Retrying could never help, so it is a 400 naming `n`, not a 429.
    with pytest.raises(InvalidRequest) as info:
        RateLimiter(Clock()).admit([("k", Limits(max_concurrent_requests=2))], weight=3)
    assert info.value.status == 400 and info.value.param == "n"


def test_weight_zero_counts_the_request_but_holds_no_slot() -> None:
    limiter = RateLimiter(Clock())
    checks = [("k", Limits(requests_per_minute=2, max_concurrent_requests=1))]
    busy = limiter.admit(checks)
    limiter.admit(checks, weight=0)  # a tokenizer call while a generation runs
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks, weight=0)
    assert info.value.code == "requests_per_minute"
    limiter.release(busy)
