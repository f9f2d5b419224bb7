"""The team profile's channel layer (core/channel_layer.py) against a
real Redis: a consumer leaving while the process's read is in flight loses
nobody else's message, which channels_redis's own layer does."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from channels_redis.core import RedisChannelLayer as StockRedisChannelLayer

from core.channel_layer import RedisChannelLayer, Watched
from tests.support.processes import PrivateRedis


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """The team profile's Redis when one is configured; else a redis-server of the
    test's own (the Makefile installs it), so that `make test` runs these too."""
    if url := os.environ.get("REDIS_URL"):
        yield url
        return
    server = PrivateRedis()
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def slow_backup(monkeypatch):
    """A busy event loop between popping a message and backing it up: the
    window in which a cancelled reader drops what it popped."""
    zadd = redis.asyncio.Redis.zadd

    async def slow_zadd(self, name, *args, **kwargs):
        if str(name).endswith("$inflight"):
            await asyncio.sleep(0.05)
        return await zadd(self, name, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.Redis, "zadd", slow_zadd)


async def leaving_while_reading(layer, rounds: int) -> int:
    """Consumer A reads for the process; a message for B arrives; A leaves
    mid-read. How many of B's messages never arrived."""
    lost = 0
    for number in range(rounds):
        a, b = await layer.new_channel(), await layer.new_channel()
        leaving = asyncio.ensure_future(layer.receive(a))
        await asyncio.sleep(0.01)
        staying = asyncio.ensure_future(layer.receive(b))
        await asyncio.sleep(0.01)
        await layer.send(b, {"type": "chat.frame", "number": number})
        await asyncio.sleep(0.02)  # the read has popped it, the backup is on its way
        leaving.cancel()
        try:
            assert (await asyncio.wait_for(staying, 2))["number"] == number
        except TimeoutError:
            lost += 1
            staying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
    await layer.flush()
    return lost


def layer_of(kind: type, url: str) -> StockRedisChannelLayer:
    return kind(hosts=[url], prefix=f"test-{uuid.uuid4().hex[:8]}")


async def test_channels_redis_itself_loses_the_message(slow_backup, redis_url):
    # The fault, shown on the stock layer, so that the next test can fail.
    # (Usually all 5; on a loaded machine a read may miss the widened window.)
    assert await leaving_while_reading(layer_of(StockRedisChannelLayer, redis_url), 5) >= 3


async def test_it_delivers_the_message_when_the_reading_consumer_leaves(slow_backup, redis_url):
    assert await leaving_while_reading(layer_of(RedisChannelLayer, redis_url), 5) == 0


async def test_it_keeps_each_consumers_messages_in_order(redis_url):
    layer = layer_of(RedisChannelLayer, redis_url)
    channels = [await layer.new_channel() for _ in range(5)]
    for number in range(20):
        for channel in channels:
            await layer.send(channel, {"type": "chat.frame", "number": number})

    async def read(channel: str) -> list[int]:
        return [(await layer.receive(channel))["number"] for _ in range(20)]

    assert await asyncio.gather(*map(read, channels)) == [list(range(20))] * 5
    await layer.flush()


async def test_it_drops_what_arrives_for_a_consumer_that_left(redis_url):
    layer = layer_of(RedisChannelLayer, redis_url)
    gone, staying = await layer.new_channel(), await layer.new_channel()
    waiting = asyncio.ensure_future(layer.receive(gone))
    await asyncio.sleep(0.05)
    waiting.cancel()
    await layer.send(gone, {"type": "chat.frame"})
    await layer.send(staying, {"type": "chat.frame", "kept": True})
    assert (await asyncio.wait_for(layer.receive(staying), 5))["kept"]
    assert gone not in layer.receive_buffer
    await layer.flush()


async def test_it_raises_a_redis_failure_in_the_waiting_consumer():
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:9/0"], prefix="nowhere")
    with pytest.raises((redis.RedisError, OSError)):
        await asyncio.wait_for(layer.receive(await layer.new_channel()), 30)


async def test_a_failed_backup_trim_is_a_warning_not_a_lost_task_error(caplog):
    # channels_redis trims the backup in a task nobody awaits: its error must not escape.
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:9/0"], prefix="nowhere")
    await layer._clean_receive_backup(0, "specific.nowhere!")
    assert "backup was left in Redis" in caplog.text


async def test_a_group_message_reaches_the_members_in_every_process(redis_url):
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    one, other, sender = (RedisChannelLayer(hosts=[redis_url], prefix=prefix) for _ in range(3))
    first, second, third = (
        await one.new_channel(),
        await one.new_channel(),
        await other.new_channel(),
    )
    for layer, channel in [(one, first), (one, second), (other, third)]:
        await layer.group_add("chat", channel)
    await sender.group_send("chat", {"type": "chat.frame", "text": "Hi"})
    received = [
        await asyncio.wait_for(layer.receive(channel), 5)
        for layer, channel in [(one, first), (one, second), (other, third)]
    ]
    assert received == [{"type": "chat.frame", "text": "Hi"}] * 3
    for layer in (one, other, sender):
        await layer.flush()


async def test_a_full_member_misses_the_group_message_and_the_others_do_not(redis_url):
    # A process's consumers share one Redis queue: the capacity is the process's.
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    busy, idle = (RedisChannelLayer(hosts=[redis_url], prefix=prefix, capacity=1) for _ in range(2))
    full, free = await busy.new_channel(), await idle.new_channel()
    await busy.group_add("chat", full)
    await idle.group_add("chat", free)
    await busy.send(full, {"type": "filler"})
    await idle.group_send("chat", {"type": "news"})
    assert await asyncio.wait_for(idle.receive(free), 5) == {"type": "news"}
    assert await asyncio.wait_for(busy.receive(full), 5) == {"type": "filler"}
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(busy.receive(full), 0.3)
    for layer in (busy, idle):
        await layer.flush()


async def test_an_expired_member_in_another_process_is_left_out(monkeypatch, redis_url):
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    sender, other = (
        RedisChannelLayer(hosts=[redis_url], prefix=prefix, group_expiry=60) for _ in range(2)
    )
    stale, fresh = await other.new_channel(), await other.new_channel()
    await other.group_add("chat", stale)
    joined = time.time()
    monkeypatch.setattr(time, "time", lambda: joined + 61)  # a minute on
    await other.group_add("other-chat", fresh)
    await sender.group_send("chat", {"type": "news"})
    await sender.group_send("other-chat", {"type": "other news"})
    assert await asyncio.wait_for(other.receive(fresh), 5) == {"type": "other news"}
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(other.receive(stale), 0.3)
    for layer in (sender, other):
        await layer.flush()


class Commands:
    """The commands a test's layers send to Redis, by name."""

    def __init__(self, monkeypatch) -> None:
        self.names: list[str] = []
        execute = redis.asyncio.Redis.execute_command

        async def counted(client, *args, **options):
            self.names.append(args[0])
            return await execute(client, *args, **options)

        monkeypatch.setattr(redis.asyncio.Redis, "execute_command", counted)


async def listening(layer: RedisChannelLayer, group: str) -> tuple[str, asyncio.Task]:
    """A member of `group` in `layer`'s process, receiving (so its reader runs)."""
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    receiving = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0)  # it starts the process's reader
    return channel, receiving


async def test_a_group_message_to_this_process_alone_costs_redis_nothing(monkeypatch, redis_url):
    layer = layer_of(RedisChannelLayer, redis_url)
    channel, receiving = await listening(layer, "chat")
    await layer.group_send("chat", {"type": "news", "number": -1})  # reads the group's members
    await receiving
    commands = Commands(monkeypatch)
    for number in range(20):
        await layer.group_send("chat", {"type": "news", "number": number})
    received = [(await layer.receive(channel))["number"] for _ in range(20)]
    monkeypatch.undo()
    assert commands.names == []
    assert received == list(range(20))
    await layer.flush()


async def test_another_process_gets_one_copy_per_message_for_all_its_members(
    monkeypatch, redis_url
):
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    sender, other = (
        RedisChannelLayer(hosts=[redis_url], prefix=prefix, capacity=1000) for _ in range(2)
    )
    here, receiving = await listening(sender, "chat")
    tabs = [await other.new_channel() for _ in range(3)]
    for tab in tabs:
        await other.group_add("chat", tab)
    await sender.group_send("chat", {"type": "news", "number": -1})
    await receiving
    commands = Commands(monkeypatch)
    for number in range(100):
        await sender.group_send("chat", {"type": "news", "number": number})
    assert commands.names == ["EVALSHA"] * 100  # one round trip each, not one per member

    async def numbers(layer: RedisChannelLayer, channel: str, count: int) -> list[int]:
        return [(await layer.receive(channel))["number"] for _ in range(count)]

    received = await asyncio.wait_for(
        asyncio.gather(numbers(sender, here, 100), *(numbers(other, tab, 101) for tab in tabs)),
        10,
    )
    monkeypatch.undo()
    assert received == [list(range(100))] + [list(range(-1, 100))] * 3  # nothing lost or reordered
    for layer in (sender, other):
        await layer.flush()


async def test_a_process_that_joins_a_watched_group_gets_what_is_sent_from_then_on(
    monkeypatch, redis_url
):
    # The sender keeps the group's members after reading them once; the joining
    # process's notice, not a new read, tells it about the new member.
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    sender, other = (RedisChannelLayer(hosts=[redis_url], prefix=prefix) for _ in range(2))
    _, receiving = await listening(sender, "chat")
    await sender.group_send("chat", {"type": "alone"})
    await receiving
    tab = await other.new_channel()
    await other.group_add("chat", tab)
    for _ in range(50):  # the notice comes through the sender's reader
        if sender.watched["chat"].queues:
            break
        await asyncio.sleep(0.02)
    commands = Commands(monkeypatch)
    await sender.group_send("chat", {"type": "news"})
    assert commands.names == ["EVALSHA"]  # the message, not another read of the members
    assert await asyncio.wait_for(other.receive(tab), 5) == {"type": "news"}
    await other.group_discard("chat", tab)
    for _ in range(50):
        if not sender.watched["chat"].queues:
            break
        await asyncio.sleep(0.02)
    commands.names.clear()
    await sender.group_send("chat", {"type": "to nobody else"})
    monkeypatch.undo()
    assert commands.names == []
    for layer in (sender, other):
        await layer.flush()


def test_only_a_processs_latest_notice_counts():
    # Two of a process's scripts (a tab closing, another opening) may run out of order.
    watched = Watched(queues=set())
    watched.notice(2, "add", "asgispecific.b!")
    watched.notice(1, "discard", "asgispecific.b!")
    assert watched.queues == {"asgispecific.b!"}
    reading = Watched()  # the members still being read: notices wait for them
    reading.notice(1, "add", "asgispecific.c!")
    assert reading.queues is None and reading.notices == [(1, "add", "asgispecific.c!")]


async def test_a_group_message_reaches_every_member_in_the_process_as_a_copy_of_its_own(
    redis_url,
):
    layer = layer_of(RedisChannelLayer, redis_url)
    first, second = await layer.new_channel(), await layer.new_channel()
    for channel in (first, second):
        await layer.group_add("chat", channel)
    await layer.group_send("chat", {"type": "chat.frame", "frame": {"text": "Hi"}})
    one, other = await layer.receive(first), await layer.receive(second)
    one["frame"]["text"] = "changed by the first"
    assert other == {"type": "chat.frame", "frame": {"text": "Hi"}}
    await layer.flush()


async def test_a_process_adds_only_its_own_channels_to_groups(redis_url):
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    one, other = (RedisChannelLayer(hosts=[redis_url], prefix=prefix) for _ in range(2))
    with pytest.raises(AssertionError):
        await one.group_add("chat", await other.new_channel())
