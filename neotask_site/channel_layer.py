"""The channel layers: for the team profile channels_redis with a receive that
no cancellation can make lose a message; for the embedded one channels' own
in-memory layer without its per-message sweep.

In channels_redis, a process's consumers share one Redis queue, read by
whichever consumer's `receive()` holds the process's receive lock, on behalf
of all of them. When that consumer is cancelled — its socket closed — between
popping a message (BZPOPMIN) and writing its in-flight backup (a ZADD, another
await), the message, usually meant for another consumer, is gone. Under load
that window is wide; losing a chat's `done` left its client waiting for good
(the load benchmark's stall), losing a delta lost one streamed frame.

Here one reader task per process and event loop pops the messages and sorts
them into the consumers' queues; a `receive()` only waits on its queue, and a
cancelled wait loses nothing. The reader is cancelled only when the last
consumer of the process has left (nobody is left to lose a message); if Redis
fails, the error reaches every waiting consumer (which closes its socket,
sessions_app.consumers), and the next receive starts a new reader.

Upstream: https://github.com/django/channels_redis/issues/151 (a cancelled
receive) and https://github.com/django/channels/issues/1683 (dropped messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as StockInMemoryChannelLayer
from channels_redis.core import ChannelLock
from channels_redis.core import RedisChannelLayer as StockRedisChannelLayer
from redis.exceptions import RedisError

# The versions whose private names this module uses (ChannelLock, the receive
# internals); pinned exactly in pyproject.toml. tests/test_patched_packages.py
# fails when another is installed: re-read their source, then update both.
PATCHED_FOR = {"channels": "4.3.2", "channels-redis": "4.3.0"}

log = logging.getLogger(__name__)

# A group message in two round trips to Redis (one script each, sent by its
# hash), where channels_redis makes four: the group's expired members out and
# the members read; then, per shard, each member's expired messages out and
# the message added to its queue unless it is full. A chat sends a group
# message per streamed frame, so these trips were an eighth of a worker's time.
GROUP_MEMBERS = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""
GROUP_DELIVER = """
local n = #KEYS
local now, expiry = tonumber(ARGV[2 * n + 1]), tonumber(ARGV[2 * n + 2])
local full = 0
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, now - expiry)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[n + i]) then
        redis.call('ZADD', KEYS[i], now, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        full = full + 1
    end
end
return full
"""

# Messages for a consumer that left are dropped for this long after it left
# (its channel name is never used again); channels_redis expires them at 60 s.
DEPARTED_SECONDS = 120.0


class RedisChannelLayer(StockRedisChannelLayer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reader: asyncio.Task | None = None
        self.consumers: set[str] = set()  # channels that receive and have not left
        self.departed: dict[str, float] = {}

    async def receive(self, channel: str) -> dict[str, Any]:
        if "!" not in channel:  # a normal channel: read directly, as before
            return await super().receive(channel)
        assert self.require_valid_channel_name(channel)
        self.consumers.add(channel)
        queue = self.receive_buffer[channel]
        while queue.empty():
            reader = self.running_reader()
            getter = asyncio.ensure_future(queue.get())
            try:
                await asyncio.wait([getter, reader], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                getter.cancel()
                self.depart(channel)
                raise
            if getter.done() and not getter.cancelled():
                message = getter.result()
                break
            getter.cancel()
            reader.result()  # Redis failed: raise it here, in the consumer
        else:
            message = queue.get_nowait()
        if queue.empty():
            self.receive_buffer.pop(channel, None)
        return message

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        connection = self.connection(self.consistent_hash(group))
        members = await connection.register_script(GROUP_MEMBERS)(
            keys=[self._group_key(group)], args=[int(time.time()) - self.group_expiry]
        )
        channels = [member.decode("utf8") for member in members]
        by_shard, messages, capacities = self._map_channel_keys_to_connection(channels, message)
        for shard, keys in by_shard.items():
            full = await self.connection(shard).register_script(GROUP_DELIVER)(
                keys=keys,
                args=[
                    *(messages[key] for key in keys),
                    *(capacities[key] for key in keys),
                    time.time(),
                    int(self.expiry),
                ],
            )
            if full:
                log.info("%s of %s channels over capacity in group %s", full, len(channels), group)

    def running_reader(self) -> asyncio.Task:
        loop = asyncio.get_running_loop()
        reader = self.reader
        if reader is None or reader.done() or reader.get_loop() is not loop:
            if reader is not None and reader.get_loop() is not loop:
                # A reader of an event loop that is gone (a sync caller's, through
                # async_to_sync) may have died holding channels_redis's lock on
                # the process's channel, bound to that loop: this loop starts
                # with a lock of its own.
                self.receive_clean_locks = ChannelLock()
            reader = self.reader = loop.create_task(self.read())
        return reader

    async def read(self) -> None:
        """Pop this process's messages and put each in its consumer's queue, until Redis fails."""
        real_channel = f"specific.{self.client_prefix}!"
        while True:
            channel, message = await self.receive_single(real_channel)
            for name in channel if isinstance(channel, list) else [channel]:
                if name not in self.departed:
                    self.receive_buffer[name].put_nowait(message)

    async def _clean_receive_backup(self, index: int, channel: str) -> None:
        # channels_redis trims a popped message's backup in a task of its own,
        # which nobody awaits: Redis failing under it ended in "Task exception
        # was never retrieved" and a traceback in the log. Untrimmed, the backup
        # is what channels_redis keeps it for (its message may come again).
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
        await super().close_pools()

    def depart(self, channel: str) -> None:
        self.receive_buffer.pop(channel, None)
        self.consumers.discard(channel)
        if not self.consumers and self.reader is not None:
            self.reader.cancel()
        now = time.monotonic()
        self.departed[channel] = now
        if len(self.departed) > 1000:
            self.departed = {
                name: left for name, left in self.departed.items() if now - left < DEPARTED_SECONDS
            }


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
