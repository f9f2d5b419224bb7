"""The channel layers: for the team profile channels_redis, with Redis only
between processes; for the embedded one channels' own in-memory layer without
its per-message sweep.

In channels_redis a group message goes through Redis to every member, those
of the sending process too, in two round trips (four in the stock layer), and
a process's consumers share one Redis queue, read one message per four round
trips by whichever consumer holds the process's receive lock. Fifty chats
streaming 50 deltas a second put 2,500 messages a second into one worker's
queue, which drained about 700 a second: it grew to 8,600 and every delta
waited seconds (docs/performance/streaming-redis.md). Here:

- **A group's members in this process** get its messages straight from
  `group_send`, as in the in-memory layer: no Redis, no waiting.
- **Other processes** with members get one copy each, in their queue, in one
  round trip; the process's reader hands it to its members there. Who they
  are is kept per group (`Watched`): read from Redis once (the group's sorted
  set, as in channels_redis; reading it also registers this process as a
  watcher of the group), then updated by notices that a process adding its
  first member or removing its last puts in every watcher's queue, in the same
  script. So a chat whose tabs all live in the process that runs it costs
  Redis nothing per frame. A process adds only its own channels to groups (as
  consumers do), and the layer has one Redis.
- **One reader** task per process and event loop pops what its queue holds in
  one round trip (BZPOPMIN, then ZPOPMIN of the rest, pipelined) and sorts it
  into the consumers' queues; a `receive()` only waits on its queue, so a
  cancelled wait loses nothing (a consumer cancelled between channels_redis's
  pop and backup lost a message meant for another: django/channels_redis#151,
  django/channels#1683). The reader ends by itself once the process has no
  consumer left, after its current pop (what that brings waits in memory for
  a consumer still to come), and forgets the watched groups (their notices
  come through it); if Redis fails, the error reaches every consumer after
  what it had already received (it closes its socket,
  sessions_app.consumers), and the next receive starts a new reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as StockInMemoryChannelLayer
from channels_redis.core import RedisChannelLayer as StockRedisChannelLayer
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError

# The versions whose private names this module uses (receive_buffer, the
# serializer, the group keys, the backup trim); pinned exactly in
# pyproject.toml. tests/test_patched_packages.py fails when another is
# installed: re-read their source, then update both.
PATCHED_FOR = {"channels": "4.3.2", "channels-redis": "4.3.0"}

log = logging.getLogger(__name__)

# A process's queue is the key of its channels' common part
# ("asgispecific.<process>!"), as in channels_redis; a group's members are its
# sorted set ("asgi:group:<name>"), its watchers the processes that keep its
# members (KEYS[2], "asgi:watch:<name>", by queue). The scripts reach the
# queues through them (one Redis, no cluster).

# The other processes' queues with members in the group, and this process a
# watcher of it from now on (ARGV: the oldest member kept, this process's
# queue, the key prefix, now, how long a watcher lasts unrenewed).
WATCH = """
local group, watchers, own, prefix = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
local now, lasts = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', group, 0, ARGV[1])
redis.call('ZREMRANGEBYSCORE', watchers, 0, now - lasts)
redis.call('ZADD', watchers, now, own)
redis.call('EXPIRE', watchers, lasts)
local queues, found = {}, {}
for _, member in ipairs(redis.call('ZRANGE', group, 0, -1)) do
    local bang = string.find(member, '!', 1, true)
    local queue = bang and prefix .. string.sub(member, 1, bang)
    if queue and queue ~= own and not found[queue] then
        found[queue] = true
        table.insert(queues, queue)
    end
end
return queues
"""
# A channel into the group or out of it (ARGV[1]: 'add' or 'discard'; then the
# channel, now, the group's expiry, this process's queue, how long a watcher
# lasts, the message's expiry, and the notice for the watchers, '' when this
# process's members of the group were there before and remain after).
MEMBER = """
local group, watchers, own = KEYS[1], KEYS[2], ARGV[5]
local now, lasts, expiry, notice = tonumber(ARGV[3]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
if ARGV[1] == 'add' then
    redis.call('ZADD', group, now, ARGV[2])
    redis.call('EXPIRE', group, ARGV[4])
else
    redis.call('ZREM', group, ARGV[2])
end
if notice ~= '' then
    for _, queue in ipairs(redis.call('ZRANGEBYSCORE', watchers, now - lasts, '+inf')) do
        if queue ~= own then
            redis.call('ZADD', queue, now, notice)
            redis.call('EXPIRE', queue, expiry)
        end
    end
end
"""
# A message to the queues in KEYS: each queue's expired messages out, then the
# message added unless the queue is full (ARGV: the message, now, its expiry,
# the capacity). Returns how many were full.
DELIVER = """
local now, expiry, capacity = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local full = 0
for _, queue in ipairs(KEYS) do
    redis.call('ZREMRANGEBYSCORE', queue, 0, now - expiry)
    if redis.call('ZCARD', queue) < capacity then
        redis.call('ZADD', queue, now, ARGV[1])
        redis.call('EXPIRE', queue, expiry)
    else
        full = full + 1
    end
end
return full
"""

# Messages for a consumer that left are dropped for this long after it left
# (its channel name is never used again); channels_redis expires them at 60 s.
DEPARTED_SECONDS = 120.0
# The most messages one read takes from the process's queue.
READ_BATCH = 1000
# A watcher not renewed for this long gets no more notices; a process renews
# (reads the group again) when it sends to the group after half of it.
WATCH_SECONDS = 60.0


@dataclass
class ReaderFailed:
    """In a consumer's queue, after what came before it: Redis failed."""

    error: BaseException


@dataclass
class Watched:
    """The other processes with members in a group, as this process knows them."""

    since: float = field(default_factory=time.monotonic)
    queues: set[str] | None = None  # None while being read from Redis
    notices: list[tuple[int, str, str]] = field(default_factory=list)  # come meanwhile
    seen: dict[str, int] = field(default_factory=dict)  # queue: its last notice's number
    reading: asyncio.Task | None = None

    def notice(self, number: int, kind: str, queue: str) -> None:
        """A process added its first member ('add') or removed its last; only its
        latest notice counts (two scripts of one process may run out of order)."""
        if self.queues is None:
            self.notices.append((number, kind, queue))
        elif number > self.seen.get(queue, -1):
            self.seen[queue] = number
            if kind == "add":
                self.queues.add(queue)
            else:
                self.queues.discard(queue)


class RedisChannelLayer(StockRedisChannelLayer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.ring_size != 1:
            raise ImproperlyConfigured("the channel layer takes one Redis (CHANNEL_LAYERS hosts)")
        self.reader: asyncio.Task | None = None
        self.consumers: set[str] = set()  # channels that receive and have not left
        self.departed: dict[str, float] = {}
        self.members: dict[str, set[str]] = {}  # group: this process's channels in it
        self.watched: dict[str, Watched] = {}  # group: the other processes in it
        self.own = f"specific.{self.client_prefix}!"  # what this process's channels start with
        self.queue = self.prefix + self.own  # and the key of their queue
        self.numbers = itertools.count()  # of this process's notices

    async def receive(self, channel: str) -> dict[str, Any]:
        if "!" not in channel:  # a normal channel: read directly, as before
            return await super().receive(channel)
        assert self.require_valid_channel_name(channel)
        self.consumers.add(channel)
        self.running_reader()
        try:
            message = await self.receive_buffer[channel].get()
        except asyncio.CancelledError:
            self.depart(channel)
            raise
        if isinstance(message, ReaderFailed):
            raise message.error  # here, in the consumer
        return message

    async def group_add(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert channel.startswith(self.own), "a process adds only its own channels to groups"
        first = not self.members.get(group)
        self.members.setdefault(group, set()).add(channel)
        await self.change(group, channel, "add", first)

    async def group_discard(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        self.leave(group, channel)  # (or its receive was cancelled, which left)
        await self.change(group, channel, "discard", group not in self.members)

    async def change(self, group: str, channel: str, kind: str, notify: bool) -> None:
        notice = {"__asgi_notice__": [next(self.numbers), kind, group, self.queue]}
        await self.connection(0).register_script(MEMBER)(
            keys=[self._group_key(group), self.watchers_key(group)],
            args=[
                *(kind, channel, time.time(), self.group_expiry, self.queue, WATCH_SECONDS),
                *(int(self.expiry), self.serialize(notice) if notify else ""),
            ],
        )

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        content = self.serialize({**message, "__asgi_group__": group})
        self.deliver(group, content)
        queues = await self.others_in(group)
        if not queues:
            return
        full = await self.connection(0).register_script(DELIVER)(
            keys=sorted(queues), args=[content, time.time(), int(self.expiry), self.capacity]
        )
        if full:
            log.info("%s processes over capacity in group %s", full, group)

    def deliver(self, group: str, content: bytes) -> None:
        """A group's message to its members in this process, each a copy of its own
        (what a member in another process gets, whichever process sent it)."""
        for channel in self.members.get(group, ()):
            message = self.deserialize(content)
            del message["__asgi_group__"]
            self.receive_buffer[channel].put_nowait(message)

    async def others_in(self, group: str) -> set[str]:
        """The queues of the other processes with members in `group`: known, or
        read from Redis (kept only while the reader, which brings the notices
        that keep them, runs)."""
        reader = self.reader
        if reader is None or reader.done() or reader.get_loop() is not asyncio.get_running_loop():
            return await self.watch(group)
        watched = self.watched.get(group)
        if watched is None or time.monotonic() - watched.since > WATCH_SECONDS / 2:
            if len(self.watched) > 1000:  # the groups not sent to lately would be read again
                now = time.monotonic()
                self.watched = {
                    group: old
                    for group, old in self.watched.items()
                    if now - old.since <= WATCH_SECONDS / 2
                }
            watched = self.watched[group] = Watched()
            watched.reading = asyncio.ensure_future(self.read_watched(group, watched))
        if watched.queues is None:
            assert watched.reading is not None
            await asyncio.shield(watched.reading)
        assert watched.queues is not None
        return watched.queues

    async def read_watched(self, group: str, watched: Watched) -> None:
        try:
            watched.queues = await self.watch(group)
        except BaseException:
            if self.watched.get(group) is watched:
                del self.watched[group]
            raise
        notices, watched.notices = watched.notices, []
        for notice in notices:
            watched.notice(*notice)

    async def watch(self, group: str) -> set[str]:
        queues = await self.connection(0).register_script(WATCH)(
            keys=[self._group_key(group), self.watchers_key(group)],
            args=[
                *(int(time.time()) - self.group_expiry, self.queue, self.prefix),
                *(time.time(), WATCH_SECONDS),
            ],
        )
        return {queue.decode() for queue in queues}

    def watchers_key(self, group: str) -> str:
        return f"{self.prefix}:watch:{group}"

    def running_reader(self) -> asyncio.Task:
        loop = asyncio.get_running_loop()
        reader = self.reader
        if reader is None or reader.done() or reader.get_loop() is not loop:
            self.watched.clear()  # kept by another loop's reader, or by none
            reader = self.reader = loop.create_task(self.read())
            # Its error reaches the consumers through their queues; retrieved
            # here, it is not logged again as "never retrieved" when collected.
            reader.add_done_callback(lambda task: task.cancelled() or task.exception())
        return reader

    async def read(self) -> None:
        """Put this process's messages in its consumers' queues while it has
        consumers, until Redis fails."""
        try:
            while self.consumers:
                async with self.connection(0).pipeline(transaction=False) as pipe:
                    pipe.bzpopmin(self.queue, timeout=self.brpop_timeout)  # waits for one,
                    pipe.zpopmin(self.queue, READ_BATCH)  # then takes what came with it
                    first, rest = await pipe.execute()
                for content in [first[1]] if first else []:
                    self.sort(content)
                for content, _ in rest:
                    self.sort(content)
        except Exception as exc:  # Redis failed (or a message could not be read)
            for channel in self.consumers:
                self.receive_buffer[channel].put_nowait(ReaderFailed(exc))
            raise
        finally:
            self.watched.clear()  # their notices come no more

    def sort(self, content: bytes) -> None:
        """A message from this process's queue to its consumers' queues."""
        message = self.deserialize(content)
        if (group := message.get("__asgi_group__")) is not None:
            self.deliver(group, content)
        elif (notice := message.get("__asgi_notice__")) is not None:
            number, kind, group, queue = notice
            if (watched := self.watched.get(group)) is not None:
                watched.notice(number, kind, queue)
        else:
            channel = message.pop("__asgi_channel__")
            for name in channel if isinstance(channel, list) else [channel]:
                if name not in self.departed:
                    self.receive_buffer[name].put_nowait(message)

    async def _clean_receive_backup(self, index: int, channel: str) -> None:
        # channels_redis trims a popped message's backup in a task of its own,
        # which nobody awaits: Redis failing under it ended in "Task exception
        # was never retrieved" and a traceback in the log. Untrimmed, the backup
        # is what channels_redis keeps it for (its message may come again).
        # (Only normal channels, which Neotask does not use, are read that way.)
        try:
            await super()._clean_receive_backup(index, channel)
        except (RedisError, OSError) as exc:
            log.warning("a received message's backup was left in Redis (%s)", exc)

    async def close_pools(self) -> None:
        """Shutting down (flush, tests): nobody receives any more."""
        reader, self.reader = self.reader, None
        if reader is not None and reader.get_loop() is asyncio.get_running_loop():
            reader.cancel()
            await asyncio.wait([reader])
        self.consumers.clear()
        self.members.clear()
        self.watched.clear()
        await super().close_pools()

    def depart(self, channel: str) -> None:
        self.receive_buffer.pop(channel, None)
        self.consumers.discard(channel)
        for group in [group for group, channels in self.members.items() if channel in channels]:
            self.leave(group, channel)
        now = time.monotonic()
        self.departed[channel] = now
        if len(self.departed) > 1000:
            self.departed = {
                name: left for name, left in self.departed.items() if now - left < DEPARTED_SECONDS
            }

    def leave(self, group: str, channel: str) -> None:
        channels = self.members.get(group, set())
        channels.discard(channel)
        if not channels:
            self.members.pop(group, None)


class InMemoryChannelLayer(StockInMemoryChannelLayer):
    """channels' in-memory layer, two costs per message lighter. Its every
    send to a group and every receive walked all channels and groups for
    expired messages (a fifth of the one process's time with fifty chats
    streaming, bench/chat_latency.py); here that walk runs at most once a
    second (messages expire after 60 s, a second later is no different). A
    group's members are sent to in turn, not in a task each: a send here
    never waits (it puts the message, or the channel is full)."""

    CLEAN_EVERY = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cleaned = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self.cleaned >= self.CLEAN_EVERY:
            self.cleaned = now
            super()._clean_expired()  # type: ignore[misc]  # private: not in types-channels

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            # As in channels: a full member misses the message, the others do not.
            with contextlib.suppress(ChannelFull):
                await self.send(channel, message)
