"""The chat's notice when a turn changed memory ("Remembered: …") and its Undo."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from core.history import Actor
from memory import recording
from memory.models import Event, EventType, Fact
from memory.undo import UNDONE_CHANGED, UNDONE_CREATED
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.websocket import connect, send, stored, until

pytestmark = pytest.mark.django_db(transaction=True)

PEANUTS = {"category": "health", "key": "allergy", "value": "allergic to peanuts"}


async def tool_turn(owner, session, llm, tool: str, arguments: dict, text: str) -> dict:
    """A turn on `text` in which the agent calls `tool`: its tool result's event."""
    llm.script(reply_with_tool(tool, arguments), Reply(text="Noted."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text=text)
    frames = await until(ws)
    await ws.disconnect()
    return stored(frames, "tool_result")


async def remembered(owner, session, llm, arguments=PEANUTS) -> dict:
    """A turn in which the agent remembers `arguments`: its tool result's event."""
    return await tool_turn(
        owner, session, llm, "remember_fact", arguments, "I am allergic to peanuts"
    )


def client_of(user: User, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def undo(client: Client, result: dict):
    return client.post(reverse("event-undo", args=[result["id"]]), HTTP_HX_REQUEST="true")


async def test_it_tells_what_was_remembered_and_undo_forgets_it(owner, session, llm):
    result = await remembered(owner, session, llm)
    fact = await Fact.objects.aget(owner=owner, key="allergy")
    assert result["data"]["memory"]["fact"] == fact.pk
    assert "Remembered: allergic to peanuts" in result["html"]
    assert reverse("event-undo", args=[result["id"]]) in result["html"]
    # Drawn from the stored event: the same after a reload.
    client = await sync_to_async(client_of)(owner)
    page = (await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode()
    assert "Remembered: allergic to peanuts" in page

    response = await sync_to_async(undo)(client, result)
    assert response.status_code == 200 and UNDONE_CREATED in response.content.decode()
    assert not await Fact.objects.filter(owner=owner).aexists()
    # Through the one forgetting path: the call and its result are redacted too.
    redacted = await Event.objects.aget(pk=result["id"])
    assert redacted.data.get("redacted") and "peanuts" not in str(redacted.data)
    page = (await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode()
    assert "Remembered: allergic" not in page
    # The next turn's prompt no longer holds the fact.
    llm.script(Reply(text="Hello."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="what should I avoid?")
    await until(ws)
    await ws.disconnect()
    system = llm.requests[-1]["messages"][0]["content"]
    assert "allergic to peanuts" not in system and "health/allergy" not in system


async def test_undo_of_an_update_puts_the_earlier_value_back(owner, session, llm):
    await sync_to_async(Fact.objects.remember)(
        owner, "health", "allergy", "none known", actor=Actor.user(owner),
        source=Fact.Source.USER, origin=Fact.Origin.PAGE,
    )  # fmt: skip
    result = await remembered(owner, session, llm)
    assert result["data"]["memory"]["action"] == "changed"
    assert "Updated: allergic to peanuts" in result["html"]
    client = await sync_to_async(client_of)(owner)
    response = await sync_to_async(undo)(client, result)
    assert UNDONE_CHANGED in response.content.decode()
    assert (await Fact.objects.aget(owner=owner, key="allergy")).value == "none known"
    # Marked undone: after a reload the notice says so, with no Undo left.
    page = (await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode()
    assert "Undone: the earlier value is back." in page
    assert reverse("event-undo", args=[result["id"]]) not in page
    # Undone once: again changes nothing.
    assert UNDONE_CHANGED in (await sync_to_async(undo)(client, result)).content.decode()
    assert (await Fact.objects.aget(owner=owner, key="allergy")).value == "none known"


async def test_it_does_not_undo_a_fact_changed_since(owner, session, llm):
    result = await remembered(owner, session, llm)
    await Fact.objects.filter(owner=owner).aupdate(value="allergic to cashews")
    client = await sync_to_async(client_of)(owner)
    assert "changed since" in (await sync_to_async(undo)(client, result)).content.decode()
    assert await Fact.objects.filter(owner=owner, value="allergic to cashews").aexists()


async def test_a_fact_said_again_as_it_was_gets_no_notice(owner, session, llm):
    await remembered(owner, session, llm)
    again = await remembered(owner, session, llm)
    assert "memory" not in again["data"] and "Remembered" not in again["html"]


async def test_a_forgotten_fact_is_told_without_undo(owner, session, llm):
    await remembered(owner, session, llm)
    forget = {"category": "health", "key": "allergy"}
    result = await tool_turn(owner, session, llm, "forget_fact", forget, "forget my allergy")
    assert "Forgot: health/allergy" in result["html"] and "Undo" not in result["html"]


async def test_a_memory_file_write_is_told_without_undo(owner, session, llm):
    write = {"path": "MEMORY.md", "text": "Likes tea.\n"}
    result = await tool_turn(owner, session, llm, "write_memory_file", write, "note I like tea")
    assert "Saved to memory: MEMORY.md" in result["html"] and "Undo" not in result["html"]


async def test_undo_is_the_owners_posted_with_csrf(owner, session, llm):
    result = await remembered(owner, session, llm)
    bob = await User.objects.acreate_user("bob", password="bob-password")
    bobs = await sync_to_async(client_of)(bob)
    # Another user's result, and a result forged to name another user's fact: 404.
    assert (await sync_to_async(undo)(bobs, result)).status_code == 404
    forged = await sync_to_async(recording.record)(
        bob, "bobs-session", EventType.TOOL_RESULT,
        {"tool_call_id": "x", "name": "remember_fact", "content": "ok",
         "memory": {**result["data"]["memory"]}},
        embed=False,
    )  # fmt: skip
    assert (await sync_to_async(undo)(bobs, {"id": forged.pk})).status_code == 404
    # Not a memory change, a GET, no CSRF token: refused.
    client = await sync_to_async(client_of)(owner)
    answer = await Event.objects.filter(owner=owner, event_type="assistant_response").afirst()
    assert (await sync_to_async(undo)(client, {"id": answer.pk})).status_code == 404
    path = reverse("event-undo", args=[result["id"]])
    assert (await sync_to_async(client.get)(path)).status_code == 405
    strict = await sync_to_async(client_of)(owner, enforce_csrf_checks=True)
    assert (await sync_to_async(strict.post)(path)).status_code == 403
    assert await Fact.objects.filter(owner=owner, value="allergic to peanuts").aexists()


async def say(owner, session, llm, text: str, *replies) -> None:
    llm.script(*replies)
    ws = await connect(owner, session.key)
    await send(ws, type="message", text=text)
    await until(ws)
    await ws.disconnect()


def shown(page: str) -> str:
    """The page without its hidden events: what the reader sees of the chat."""
    return re.sub(r"<li [^>]*\shidden>.*?</li>", "", page, flags=re.S)


async def test_a_turn_that_only_remembered_shows_the_notice_alone(owner, session, llm):
    # The model saves the fact and writes nothing: the notice says what was done, with its
    # Undo; the plain confirmation ("Saved: …", with Copy and Regenerate) is not said again.
    await say(
        owner,
        session,
        llm,
        "I am allergic to peanuts",
        reply_with_tool("remember_fact", PEANUTS),
        Reply(text=""),
    )
    client = await sync_to_async(client_of)(owner)
    page = (await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode()
    answer = await Event.objects.filter(owner=owner).alatest("id")
    assert answer.data["content"] == "Saved: allergy — allergic to peanuts"  # for API clients
    assert f'id="event-{answer.pk}"' in page  # its place in the chat, hidden
    visible = shown(page)
    assert "Remembered: allergic to peanuts" in visible and 'class="undo' in visible
    assert "Saved:" not in visible and "regenerate" not in visible
    assert "bubble assistant" not in visible


async def test_a_turn_with_other_tools_still_confirms_them(owner, session, llm):
    both = Reply(
        tool_calls=[
            {"name": "remember_fact", "arguments": json.dumps(PEANUTS)},
            {"name": "search_memory", "arguments": json.dumps({"query": "xyzzy"})},
        ]
    )
    await say(owner, session, llm, "I am allergic to peanuts", both, Reply(text=""))
    client = await sync_to_async(client_of)(owner)
    visible = shown((await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode())
    assert "Remembered: allergic to peanuts" in visible
    assert "Saved: allergy — allergic to peanuts" in visible and "Searched memory" in visible
