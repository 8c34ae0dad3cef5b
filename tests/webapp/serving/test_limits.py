"""The limiters: sliding one-minute windows, concurrency slots, all-or-nothing admission.

Every test runs on the in-process limiter and on the Redis one (a real redis-server), which must decide
alike; the last tests check what only a shared store can do: two replicas enforcing one limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from webapp.core.errors import InvalidRequest, RateLimited
from webapp.serving.limits import Limiter, Limits, RateLimiter

MakeLimiter = Callable[..., Limiter]


@pytest.fixture(params=["memory", "redis"])
def make_limiter(request: pytest.FixtureRequest) -> Iterator[MakeLimiter]:
    """A factory of limiters of one kind; Redis ones share the test's (flushed) database."""
    if request.param == "memory":
        yield lambda clock=None: RateLimiter(clock or Clock())
        return
    import redis

    from webapp.serving.redis_limits import RedisRateLimiter

    client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    client.flushdb()
    yield lambda clock=None: RedisRateLimiter(client, clock=clock or Clock())
    client.flushdb()
    client.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_window(make_limiter: MakeLimiter) -> None:
    clock = Clock()
    limiter = make_limiter(clock)
    checks = [("k", Limits(requests_per_minute=2))]
    limiter.admit(checks)
    clock.now += 10
    limiter.admit(checks)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks)
    assert info.value.status == 429 and info.value.retry_after == 50
    clock.now += 50
    limiter.admit(checks)


def test_tokens_per_minute_retry_after(make_limiter: MakeLimiter) -> None:
    clock = Clock()
    limiter = make_limiter(clock)
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


def test_concurrency_and_release(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter()
    checks = [("k", Limits(max_concurrent_requests=1))]
    first = limiter.admit(checks)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks)
    assert info.value.retry_after == 1
    limiter.release(first)
    limiter.release(first)  # idempotent per bucket floor: never below zero
    limiter.admit(checks)


def test_admission_is_all_or_nothing(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter()
    key, user = ("key", 1), ("user", 1)
    limiter.admit([(user, Limits(requests_per_minute=1))])
    with pytest.raises(RateLimited):
        limiter.admit([(key, Limits(requests_per_minute=1)), (user, Limits(requests_per_minute=1))])
    limiter.admit([(key, Limits(requests_per_minute=1))])  # the key was not charged by the failed attempt


def test_zero_limit_always_refuses(make_limiter: MakeLimiter) -> None:
    with pytest.raises(RateLimited) as info:
        make_limiter().admit([("k", Limits(requests_per_minute=0))])
    assert info.value.retry_after == 60


def test_sequences_count_against_concurrency(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter()
    checks = [("k", Limits(max_concurrent_requests=4))]
    three = limiter.admit(checks, weight=3)
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks, weight=2)  # 3 + 2 > 4
    assert info.value.code == "concurrent_requests"
    one = limiter.admit(checks)
    limiter.release(three)
    limiter.admit(checks, weight=3)
    limiter.release(one)


def test_more_sequences_than_the_cap_is_a_client_error(make_limiter: MakeLimiter) -> None:
    # Retrying could never help, so it is a 400 naming `n`, not a 429.
    with pytest.raises(InvalidRequest) as info:
        make_limiter().admit([("k", Limits(max_concurrent_requests=2))], weight=3)
    assert info.value.status == 400 and info.value.param == "n"


def test_weight_zero_counts_the_request_but_holds_no_slot(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter()
    checks = [("k", Limits(requests_per_minute=2, max_concurrent_requests=1))]
    busy = limiter.admit(checks)
    limiter.admit(checks, weight=0)  # a tokenizer call while a generation runs
    with pytest.raises(RateLimited) as info:
        limiter.admit(checks, weight=0)
    assert info.value.code == "requests_per_minute"
    limiter.release(busy)


def test_uncounted_work_spends_tokens_but_no_request(make_limiter: MakeLimiter) -> None:
    """A chat title: held to the caller's token limit and counted in it, never one of its requests."""
    limiter = make_limiter()
    checks = [("k", Limits(requests_per_minute=1, tokens_per_minute=100))]
    tokens_only = [("k", Limits(tokens_per_minute=100))]
    title = limiter.admit(tokens_only, weight=0, counted=False)
    limiter.add_tokens(title, 100)
    with pytest.raises(RateLimited) as info:
        limiter.admit(tokens_only, weight=0, counted=False)
    assert info.value.code == "tokens_per_minute"  # the title's tokens count
    fresh = [("j", Limits(requests_per_minute=1))]
    limiter.admit(fresh, weight=0, counted=False)
    limiter.admit(fresh)  # the uncounted admission left the one request of the minute free
    with pytest.raises(RateLimited) as info:
        limiter.admit(fresh)
    assert info.value.code == "requests_per_minute"
    with pytest.raises(RateLimited):
        limiter.admit(checks)


@pytest.fixture
def replicas(redis_url: str) -> Iterator[tuple[Any, Any, Clock]]:
    """Two replicas' limiters on one Redis, with one clock."""
    import redis

    from webapp.serving.redis_limits import RedisRateLimiter

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    clock = Clock()
    yield RedisRateLimiter(client, clock=clock), RedisRateLimiter(client, clock=clock, lease_s=5), clock
    client.flushdb()
    client.close()


def test_two_replicas_enforce_one_limit(replicas: tuple[Any, Any, Clock]) -> None:
    a, b, clock = replicas
    checks = [(("user", 7), Limits(requests_per_minute=3, tokens_per_minute=100, max_concurrent_requests=2))]
    first = a.admit(checks)
    b.admit(checks)
    with pytest.raises(RateLimited) as info:
        a.admit(checks)  # two slots, both taken: one on each replica
    assert info.value.code == "concurrent_requests"
    b.release(first)  # any replica may release what another admitted
    a.add_tokens(first, 120)
    with pytest.raises(RateLimited) as info:
        b.admit(checks)  # the tokens counted on a hold on b
    assert info.value.code == "tokens_per_minute"
    clock.now += 61
    third = b.admit(checks)
    assert third.id and third.weight == 1


def test_a_dead_replicas_slots_come_back_when_their_lease_ends(replicas: tuple[Any, Any, Clock]) -> None:
    _, short_lease, clock = replicas
    checks = [("k", Limits(max_concurrent_requests=1))]
    short_lease.admit(checks)  # this replica dies before releasing
    with pytest.raises(RateLimited):
        short_lease.admit(checks)
    clock.now += 6
    short_lease.admit(checks)
