"""Shared rate windows keep what every worker dispatched of a tool in the last window, in Redis.

A window is a sorted set per tool and rate name: one member per dispatch (``ID|AMOUNT``) scored
by the Redis clock at admission. One script looks at every window of the tool and admits the
dispatch into all of them or none, so any number of workers together never admit more than the
limit within any window (admission time, Redis clock). A tool's keys share one hash tag: one
Redis Cluster slot. A Redis that lost its data forgets the windows: a burst may follow.
"""

from __future__ import annotations

from collections.abc import Sequence

from outlast._limits import Rate
from outlast.queue.streams import Queue

# KEYS[1]: the tool's back-off key; KEYS[2..]: its windows. ARGV[1]: the member's id, then for
# each window: its length (ms), its limit, the amount wanted. Returns 0 when admitted, else the
# milliseconds until there may be room.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local blocked = redis.call('PTTL', KEYS[1])
if blocked > 0 then return blocked end
local wait = 0
for i = 2, #KEYS do
  local window = tonumber(ARGV[3 * i - 4])
  local limit = tonumber(ARGV[3 * i - 3])
  local want = tonumber(ARGV[3 * i - 2])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local entries = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
  local used = 0
  for j = 1, #entries, 2 do used = used + tonumber(string.match(entries[j], '|([^|]*)$')) end
  local over = used + want - limit
  if over > 0 then
    for j = 1, #entries, 2 do
      over = over - tonumber(string.match(entries[j], '|([^|]*)$'))
      if over <= 0 then
        wait = math.max(wait, tonumber(entries[j + 1]) + window - now)
        break
      end
    end
  end
end
if wait > 0 then return wait end
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], now, ARGV[1] .. '|' .. ARGV[3 * i - 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[3 * i - 4])
end
return 0
"""

# The actual replaces the estimate in the member admitted (same admission time).
_SETTLE = """
local old = ARGV[1] .. '|' .. ARGV[2]
local score = redis.call('ZSCORE', KEYS[1], old)
if not score then return 0 end
redis.call('ZREM', KEYS[1], old)
redis.call('ZADD', KEYS[1], score, ARGV[1] .. '|' .. ARGV[3])
return 1
"""

# Every worker holds the tool back for ARGV[1] ms (a longer back-off already set stands).
_BLOCK = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
"""


def _amount(x: float) -> str:
    return repr(float(x))


class RateWindows:
    """``RateWindows`` keeps the rate windows of every tool, in the queue's Redis under its prefix."""

    def __init__(self, queue: Queue) -> None:
        self._q = queue

    def key(self, tool: str, name: str) -> str:
        return f"{self._q.prefix}:{{rate:{tool}}}:{name}"

    async def _eval(self, script: str, keys: Sequence[str], *args: str) -> int:
        return int(await self._q.script(script, list(keys), *args))

    async def take(self, tool: str, wants: Sequence[tuple[Rate, float]], member: str) -> float:
        """Admit one dispatch of ``tool`` into all its windows (``wants``: each rate and the
        amount reserved), or none: 0 when admitted, else the seconds to wait before trying again."""
        keys = [self.key(tool, "backoff"), *(self.key(tool, r.name) for r, _ in wants)]
        args = [member]
        for rate, want in wants:
            args += [str(int(rate.window * 1000)), _amount(rate.limit), _amount(want)]
        return await self._eval(_TAKE, keys, *args) / 1000

    async def settle(self, tool: str, name: str, member: str, reserved: float, actual: float) -> bool:
        """Replace a dispatch's reserved amount by what it really used."""
        amounts = _amount(reserved), _amount(actual)
        return bool(await self._eval(_SETTLE, [self.key(tool, name)], member, *amounts))

    async def back_off(self, tool: str, seconds: float) -> None:
        """Hold every worker's dispatches of ``tool`` back for ``seconds`` (a 429's Retry-After)."""
        await self._eval(_BLOCK, [self.key(tool, "backoff")], str(max(int(seconds * 1000), 1)))
