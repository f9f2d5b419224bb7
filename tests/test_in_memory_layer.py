"""The embedded profile's channel layer (core/channel_layer.py): channels'
in-memory layer, its expiry walk run at most once a second and its group sends
made in turn — with channels' behaviour kept."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import InMemoryChannelLayer as StockInMemoryChannelLayer

from core.channel_layer import InMemoryChannelLayer


async def joined(layer: InMemoryChannelLayer, count: int, group: str = "chat") -> list[str]:
    names = [await layer.new_channel() for _ in range(count)]
    for name in names:
        await layer.group_add(group, name)
    return names


async def test_a_group_message_reaches_every_member_as_a_copy_of_its_own():
    layer = InMemoryChannelLayer()
    first, second = await joined(layer, 2)
    await layer.group_send("chat", {"type": "chat.frame", "frame": {"text": "Hi"}})
    one, other = await layer.receive(first), await layer.receive(second)
    one["frame"]["text"] = "changed by the first"
    assert other == {"type": "chat.frame", "frame": {"text": "Hi"}}


async def test_a_full_member_misses_the_message_and_the_others_do_not():
    layer = InMemoryChannelLayer(capacity=1)
    full, free = await joined(layer, 2)
    await layer.send(full, {"type": "filler"})
    await layer.group_send("chat", {"type": "news"})
    assert await layer.receive(full) == {"type": "filler"}
    assert await layer.receive(free) == {"type": "news"}
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(full), 0.1)


async def test_expired_messages_still_expire_and_take_their_member_out_of_groups():
    layer = InMemoryChannelLayer(expiry=0.05)
    layer.CLEAN_EVERY = 0.1
    gone, alive = await joined(layer, 2)
    await layer.send(gone, {"type": "never read"})
    await asyncio.sleep(0.2)
    await layer.group_send("chat", {"type": "later"})
    assert list(layer.groups["chat"]) == [alive]
    assert await layer.receive(alive) == {"type": "later"}


async def test_it_walks_for_expired_messages_at_most_once_a_second(monkeypatch):
    walks = []
    walk = StockInMemoryChannelLayer._clean_expired
    monkeypatch.setattr(
        StockInMemoryChannelLayer, "_clean_expired", lambda self: walks.append(walk(self))
    )
    layer = InMemoryChannelLayer()
    (member,) = await joined(layer, 1)
    for number in range(500):
        await layer.group_send("chat", {"type": "delta", "n": number})
        assert (await layer.receive(member))["n"] == number
    assert len(walks) == 1
