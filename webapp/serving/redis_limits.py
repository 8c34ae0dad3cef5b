"""The limiter on Redis: every replica counts in the same sorted sets, so two replicas enforce one limit.

Per bucket, three sorted sets scored by time (milliseconds on the replicas' clock):
- `req`: one member per admitted request, kept for the one-minute window;
- `tok`: one member per request's token count ("<id>:<tokens>"), kept for the window;
- `act`: one member per running admission ("<id>:<weight>"), scored by a lease's end, so that the slots
  of a replica that died come back once their lease runs out instead of never.
Admission is one Lua script: every bucket is checked, then all are charged, or none (as RateLimiter).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from webapp.serving.limits import (
    WINDOW_S,
    Admission,
    Bucket,
    Limits,
    concurrency_limited,
    never_fits,
    requests_limited,
    tokens_limited,
)

# How long a running admission holds its slot without being released: past the longest request (the API
# cuts generation at MOONCAKE_API_REQUEST_TIMEOUT, 600 s by default) with a margin.
LEASE_S = 1800.0
KEY_PREFIX = "mooncake:limits:"

# KEYS: per bucket, its req, tok and act sets. ARGV: now_ms, window_ms, lease_ms, weight, id, counted (1:
# the request counts toward requests per minute, 0: not), then per bucket rpm, tpm, cap (-1: unlimited).
# Returns {0} when admitted, else {bucket index (1-based), reason, retry_after_ms} with reason 1 requests,
# 2 tokens, 3 concurrency, 4 never fits.
_ADMIT = """
local now, window, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local weight, id, counted = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local buckets = #KEYS / 3
for b = 0, buckets - 1 do
  local req, tok, act = KEYS[b * 3 + 1], KEYS[b * 3 + 2], KEYS[b * 3 + 3]
  local rpm, tpm, cap = tonumber(ARGV[7 + b * 3]), tonumber(ARGV[8 + b * 3]), tonumber(ARGV[9 + b * 3])
  redis.call('ZREMRANGEBYSCORE', req, '-inf', now - window)
  redis.call('ZREMRANGEBYSCORE', tok, '-inf', now - window)
  redis.call('ZREMRANGEBYSCORE', act, '-inf', now)
  if rpm >= 0 then
    local count = redis.call('ZCARD', req)
    if count >= rpm then
      local wait = window
      if rpm > 0 then
        local oldest = redis.call('ZRANGE', req, count - rpm, count - rpm, 'WITHSCORES')
        wait = tonumber(oldest[2]) + window - now
      end
      return {b + 1, 1, wait}
    end
  end
  if tpm >= 0 then
    local events = redis.call('ZRANGE', tok, 0, -1, 'WITHSCORES')
    local total = 0
    for i = 1, #events, 2 do
      total = total + tonumber(string.match(events[i], ':(%d+)$'))
    end
    if total >= tpm then
      local excess, wait = total - tpm, window
      for i = 1, #events, 2 do
        excess = excess - tonumber(string.match(events[i], ':(%d+)$'))
        if excess < 0 then
          wait = tonumber(events[i + 1]) + window - now
          break
        end
      end
      return {b + 1, 2, wait}
    end
  end
  if cap > 0 and weight > cap then
    return {b + 1, 4, 0}
  end
  if cap >= 0 and weight > 0 then
    local running = 0
    for _, member in ipairs(redis.call('ZRANGE', act, 0, -1)) do
      running = running + tonumber(string.match(member, ':(%d+)$'))
    end
    if running + weight > cap then
      return {b + 1, 3, 0}
    end
  end
end
for b = 0, buckets - 1 do
  local req, tok, act = KEYS[b * 3 + 1], KEYS[b * 3 + 2], KEYS[b * 3 + 3]
  if counted == 1 then
    redis.call('ZADD', req, now, id)
    redis.call('PEXPIRE', req, window)
  end
  if weight > 0 then
    redis.call('ZADD', act, now + lease, id .. ':' .. weight)
    redis.call('PEXPIRE', act, lease)
  end
end
return {0}
"""


def _unlimited(value: int | None) -> int:
    return -1 if value is None else value


class RedisRateLimiter:
    """RateLimiter's decisions, counted in Redis; `clock` gives seconds (time.time on every replica)."""

    local = False

    def __init__(
        self, client: redis.Redis, *, clock: Callable[[], float] = time.time, lease_s: float = LEASE_S
    ) -> None:
        self._client = client
        self._clock = clock
        self._lease_ms = int(lease_s * 1000)
        self._admit: Any = client.register_script(_ADMIT)

    @classmethod
    def from_url(cls, url: str) -> RedisRateLimiter:
        return cls(redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5))

    @staticmethod
    def _keys(bucket: Bucket) -> list[str]:
        base = KEY_PREFIX + repr(bucket)
        return [base + ":req", base + ":tok", base + ":act"]

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def admit(
        self, checks: Sequence[tuple[Bucket, Limits]], *, weight: int = 1, counted: bool = True
    ) -> Admission:
        """Admit one request of `weight` sequences against every bucket at once, or raise and admit none."""
        admission = Admission(buckets=tuple(b for b, _ in checks), weight=weight, id=uuid.uuid4().hex)
        if not checks:
            return admission
        keys = [key for bucket, _ in checks for key in self._keys(bucket)]
        args: list[int | str] = [self._now_ms(), int(WINDOW_S * 1000), self._lease_ms, weight, admission.id]
        args.append(1 if counted else 0)
        for _, limits in checks:
            args += [
                _unlimited(limits.requests_per_minute),
                _unlimited(limits.tokens_per_minute),
                _unlimited(limits.max_concurrent_requests),
            ]
        result = [int(x) for x in self._admit(keys=keys, args=args)]
        if result[0] == 0:
            return admission
        index, reason, wait_ms = result
        limits = checks[index - 1][1]
        if reason == 1:
            raise requests_limited(int(limits.requests_per_minute or 0), wait_ms / 1000)
        if reason == 2:
            raise tokens_limited(int(limits.tokens_per_minute or 0), wait_ms / 1000)
        if reason == 4:
            raise never_fits(weight, int(limits.max_concurrent_requests or 0))
        raise concurrency_limited(int(limits.max_concurrent_requests or 0))

    def add_tokens(self, admission: Admission, tokens: int) -> None:
        if tokens <= 0 or not admission.buckets:
            return
        now = self._now_ms()
        pipe = self._client.pipeline()
        for bucket in admission.buckets:
            key = self._keys(bucket)[1]
            pipe.zadd(key, {f"{admission.id}:{tokens}": now})
            pipe.pexpire(key, int(WINDOW_S * 1000))
        pipe.execute()

    def release(self, admission: Admission) -> None:
        if admission.weight <= 0 or not admission.buckets:
            return
        pipe = self._client.pipeline()
        for bucket in admission.buckets:
            pipe.zrem(self._keys(bucket)[2], f"{admission.id}:{admission.weight}")
        pipe.execute()

    def reset(self) -> None:
        keys = list(self._client.scan_iter(match=KEY_PREFIX + "*"))
        if keys:
            self._client.delete(*keys)
