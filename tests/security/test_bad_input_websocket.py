"""Fuzzing the chat websocket (docs/api.md, "The websocket protocol"): whatever a
client sends, a bad frame gets one error frame, the connection stays open and
usable, and nothing is stored.

Runs against the real consumer and channel layer (in memory, or Redis on the team
profile); tests/test_chat_consumer.py holds the hand-picked cases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.models import ApprovalRequest
from memory.models import Event
from sessions_app import chat
from sessions_app.consumers import MAX_FRAME_BYTES
from sessions_app.models import Session
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, receive, send, until

pytestmark = pytest.mark.django_db(transaction=True)

VALID_TYPES = ("message", "approval", "stop")
FUZZ = settings(
    max_examples=60,
    deadline=None,
    # The owner and session fixtures are shared by the examples on purpose: a
    # rejected frame must leave them as they were, which is what is checked.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text a person could type, including the awkward parts of Unicode: RTL and
# bidi controls, zero-width joiners, combining marks, emoji, non-characters.
EDGE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        st.sampled_from(["\u202e", "\u200f", "\u200d", "\u0301", "\ufeff", "\uffff", "👩", "🎉"]),
    ),
    max_size=40,
)
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), EDGE_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(EDGE_TEXT, inner, max_size=4),
    max_leaves=12,
)


def not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


def dumps(frame: Any) -> str:
    # ensure_ascii keeps lone surrogates as \ud800 escapes, as a client may send them.
    return json.dumps(frame, ensure_ascii=True)


NOT_JSON = st.text(max_size=200).filter(not_json)
NOT_AN_OBJECT = JSON_VALUES.filter(lambda value: not isinstance(value, dict)).map(dumps)
UNKNOWN_TYPE = st.builds(
    lambda kind, extra: dumps({**extra, "type": kind}),
    JSON_VALUES.filter(lambda kind: kind not in VALID_TYPES),
    st.dictionaries(EDGE_TEXT, JSON_VALUES, max_size=3),
)
MISSING_TYPE = st.dictionaries(
    EDGE_TEXT.filter(lambda key: key != "type"), JSON_VALUES, max_size=4
).map(dumps)
BAD_TEXT = st.one_of(
    JSON_VALUES.filter(lambda value: not isinstance(value, str)),
    st.text(alphabet=" \t\r\n\u00a0\u2003\u3000", max_size=20),  # nothing but blanks
    EDGE_TEXT.map(lambda text: text + "\x00"),  # PostgreSQL cannot store NUL
    EDGE_TEXT.map(lambda text: "\ud800" + text),  # a lone surrogate: not Unicode text
)
BAD_MESSAGE = BAD_TEXT.map(lambda text: dumps({"type": "message", "text": text}))
MESSAGE_WITHOUT_TEXT = st.just(dumps({"type": "message"}))
BAD_APPROVAL = st.builds(
    lambda request_id, decision: dumps(
        {"type": "approval", "request_id": request_id, "decision": decision}
    ),
    JSON_VALUES,
    st.one_of(st.sampled_from(["once", "always", "deny"]), JSON_VALUES),
)
BAD_FRAMES = st.one_of(
    NOT_JSON,
    NOT_AN_OBJECT,
    UNKNOWN_TYPE,
    MISSING_TYPE,
    BAD_MESSAGE,
    MESSAGE_WITHOUT_TEXT,
    BAD_APPROVAL,
)


async def send_text(ws: WebsocketCommunicator, frame: str) -> None:
    # send_to refuses an empty frame; a client can send one.
    await ws.send_input({"type": "websocket.receive", "text": frame})


async def assert_still_usable(ws: WebsocketCommunicator) -> None:
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"


async def assert_nothing_stored(owner: User, session: Session) -> None:
    assert not await Event.objects.filter(owner=owner).aexists()
    assert not await ApprovalRequest.objects.filter(owner=owner).aexists()
    assert [s.pk async for s in Session.objects.filter(owner=owner)] == [session.pk]
    await session.arefresh_from_db()
    assert session.title == ""  # set by the first stored message


async def assert_error_frame(ws: WebsocketCommunicator) -> str:
    reply = await receive(ws)
    assert reply["type"] == "error"
    assert isinstance(reply["message"], str) and reply["message"].strip()
    assert "Traceback" not in reply["message"]
    return reply["message"]


@FUZZ
@given(frames=st.lists(BAD_FRAMES, min_size=1, max_size=5))
async def test_it_answers_every_bad_text_frame_with_an_error_and_stays_open(owner, session, frames):
    ws = await connect(owner, session.key)
    for frame in frames:
        await send_text(ws, frame)
        await assert_error_frame(ws)
    await assert_still_usable(ws)
    await ws.disconnect()
    await assert_nothing_stored(owner, session)


@settings(FUZZ, max_examples=30)
@given(data=st.binary(max_size=2048))
async def test_it_answers_every_binary_frame_with_an_error(owner, session, data):
    ws = await connect(owner, session.key)
    await ws.send_input({"type": "websocket.receive", "bytes": data})  # b"" too
    assert "JSON text frames" in await assert_error_frame(ws)
    await assert_still_usable(ws)
    await ws.disconnect()
    await assert_nothing_stored(owner, session)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\x00world", "cannot contain NUL characters"),
        ("\ud83d alone", "not valid Unicode"),
        ("\udfff", "not valid Unicode"),
    ],
)
async def test_it_names_nul_and_lone_surrogates_in_a_message(owner, session, text, message):
    # Before: NUL failed the turn on PostgreSQL ("The server failed"), and a lone
    # surrogate got Python's codec error as its message.
    ws = await connect(owner, session.key)
    await ws.send_to(text_data=dumps({"type": "message", "text": text}))
    assert message in await assert_error_frame(ws)
    await ws.disconnect()
    await assert_nothing_stored(owner, session)


@pytest.mark.parametrize("kind", [[], {}, ["message"], {"type": "message"}])
async def test_it_survives_an_unhashable_type(owner, session, kind):
    # Before: looking a list or an object up in the handlers raised TypeError and
    # killed the consumer.
    ws = await connect(owner, session.key)
    await send(ws, type=kind, text="hello")
    assert "Unknown frame type" in await assert_error_frame(ws)
    await assert_still_usable(ws)
    await ws.disconnect()


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ("[" * 60_000, "nested too deeply"),
        ('{"a": ' * 5_000 + "1" + "}" * 5_000, "nested too deeply"),
        ('{"type": ' + "[" * 500 + "]" * 500 + "}", "Unknown frame type [[[[[[[...]]]]]]]"),
        (dumps({"type": "x" * 60_000}), "Unknown frame type 'xxxxxxxxxxxx...xxxxxxxxxxxxx'"),
    ],
)
async def test_it_survives_deep_nesting_and_echoes_little(owner, session, frame, message):
    # Before: json.loads raised RecursionError (not a ValueError) and killed the consumer.
    ws = await connect(owner, session.key)
    await send_text(ws, frame)
    reply = await assert_error_frame(ws)
    assert message in reply and len(reply) < 200
    await assert_still_usable(ws)
    await ws.disconnect()
    await assert_nothing_stored(owner, session)


@pytest.mark.parametrize("size", [MAX_FRAME_BYTES + 1, 1024 * 1024, 8 * 1024 * 1024])
async def test_it_refuses_a_huge_frame_and_stores_nothing(owner, session, size):
    ws = await connect(owner, session.key)
    await ws.send_to(text_data=dumps({"type": "message", "text": "x" * size}))
    assert "larger than" in await assert_error_frame(ws)
    await assert_still_usable(ws)
    await ws.disconnect()
    await assert_nothing_stored(owner, session)


async def test_it_takes_a_message_of_exactly_the_limit_and_refuses_one_byte_more(
    owner, session, llm
):
    llm.script(Reply(text="Long read."))
    ws = await connect(owner, session.key)
    # Three-byte characters: the limit counts UTF-8 bytes, not characters.
    over = "€" * (chat.MAX_MESSAGE_BYTES // 3) + "xx"
    assert len(over.encode()) == chat.MAX_MESSAGE_BYTES + 1
    await ws.send_to(text_data=json.dumps({"type": "message", "text": over}, ensure_ascii=False))
    assert "longer than 64 KB" in await assert_error_frame(ws)
    assert not await Event.objects.filter(owner=owner).aexists()
    exact = over[:-1]
    await ws.send_to(text_data=json.dumps({"type": "message", "text": exact}, ensure_ascii=False))
    frames = await until(ws)
    assert frames[-1]["status"] == "completed"
    stored = await Event.objects.aget(owner=owner, event_type="user_message")
    assert stored.data["content"] == exact
    await ws.disconnect()


@settings(FUZZ, max_examples=15)
@given(text=EDGE_TEXT.filter(lambda text: text.strip() and not text.startswith("/")))
async def test_it_stores_and_escapes_any_unicode_message_verbatim(owner, session, llm, text):
    llm.script(Reply(text="ok"))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text=text)
    frames = await until(ws)
    await ws.disconnect()
    assert frames[-1]["status"] == "completed"
    user = next(f["event"] for f in frames if f["type"] == "event")
    stored = await Event.objects.aget(pk=user["id"])
    assert stored.data["content"] == text.strip()
    assert "<script" not in user["html"]
    await Event.objects.filter(owner=owner).adelete()


async def test_it_answers_a_real_message_after_a_burst_of_bad_frames(owner, session, llm):
    llm.script(Reply(text="Still here."))
    ws = await connect(owner, session.key)
    burst = ["", "{", "null", '{"type": null}', '{"type": "message", "text": []}', "[" * 10_000]
    for frame in burst:
        await send_text(ws, frame)
        await assert_error_frame(ws)
    await send(ws, type="message", text="are you there?")
    frames = await until(ws)
    assert frames[-1]["status"] == "completed"
    kinds = [f["event"]["event_type"] for f in frames if f["type"] == "event"]
    assert kinds == ["user_message", "assistant_response"]
    assert await Event.objects.filter(owner=owner).acount() == 2
    await ws.disconnect()
