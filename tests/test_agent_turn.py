from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from agent import answer_stream, runtime
from agent.approvals import decide
from agent.models import ApprovalRequest, TerminalAllowedPrefix
from agent.prompt import estimate_request_tokens
from agent.runtime import TurnRequest, run_turn
from memory.models import Event, Fact
from sessions_app.broadcast import render_event
from tests.support.frames import Frames
from tests.support.records import take_queued_tasks
from tests.support.scripted_llm import Reply, reply_with_tool

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def terminal_on(configure):
    configure("terminal", enabled=True)


def request_for(owner: User, **fields: Any) -> TurnRequest:
    return TurnRequest(owner=owner, session_id="s1", **fields)


def stored(owner: User) -> list[Event]:
    return list(Event.objects.filter(owner=owner).order_by("id"))


async def test_it_runs_a_full_turn_with_tools_approval_and_usage(owner, llm, terminal_on):
    llm.script(
        reply_with_tool("remember_fact", {"category": "pref", "key": "drink", "value": "tea"}),
        reply_with_tool(
            "terminal",
            {"command": "echo hello"},
            usage={
                "prompt_tokens": 40,
                "completion_tokens": 6,
                "prompt_tokens_details": {"cached_tokens": 30},
            },
        ),
        Reply(
            deltas=["Saved ", "and ", "ran it."],
            usage={"prompt_tokens": 60, "completion_tokens": 4},
        ),
    )
    frames = Frames(owner, decision="always")
    result = await run_turn(request_for(owner), "Remember I like tea, then say hello", frames)
    await asyncio.gather(*frames.clicks)

    assert result.status == "completed"
    assert result.answer == "Saved and ran it."
    assert "".join(f["text"] for f in frames.of("delta")) == "Saved and ran it."
    assert frames.event_types() == [
        "user_message",
        "assistant_response",
        "tool_call",
        "tool_result",
        "assistant_response",
        "tool_call",
        "tool_result",
        "assistant_response",
    ]
    # The turn waited for approval, and "always" stored the prefix.
    [approval] = frames.of("approval_request")
    assert approval["command"] == "echo hello"
    assert await sync_to_async(
        lambda: list(TerminalAllowedPrefix.objects.values_list("prefix", flat=True))
    )() == ["echo"]
    fact = await Fact.objects.aget(owner=owner, key="drink")
    assert (fact.value, fact.source) == ("tea", "agent")
    results = [e for e in await sync_to_async(stored)(owner) if e.event_type == "tool_result"]
    assert results[1].data["content"] == "exit code 0\nhello\n"
    # Usage of all three calls: input, output, cache read, cache write.
    assert result.usage.as_dict() == {
        "input": 120,
        "output": 15,
        "cache_read": 30,
        "cache_write": 0,
    }
    # ... also kept with the message that started the turn.
    user_event = await Event.objects.aget(pk=result.user_event_id)
    assert user_event.data["turn_usage"] == result.usage.as_dict()
    # The model saw the tool results on the next call.
    last_messages = llm.requests[2]["messages"]
    assert last_messages[-1]["role"] == "tool"
    assert "hello" in last_messages[-1]["content"]
    assert "pref/drink: tea" in last_messages[0]["content"]  # facts in the system prompt

    # The same command again runs without asking.
    llm.script(reply_with_tool("terminal", {"command": "echo hello"}), Reply(text="Done again."))
    frames = Frames()
    result = await run_turn(request_for(owner), "again", frames)
    assert result.status == "completed"
    assert frames.of("approval_request") == []
    assert "hello" in frames.of("event")[3]["event"]["data"]["content"]


async def test_it_never_auto_allows_chained_commands(owner, llm, terminal_on):
    await TerminalAllowedPrefix.objects.acreate(owner=owner, prefix="echo")
    llm.script(reply_with_tool("terminal", {"command": "echo hi; rm -rf ~"}), Reply(text="ok"))
    frames = Frames(owner, decision="deny")
    await run_turn(request_for(owner), "go", frames)
    await asyncio.gather(*frames.clicks)
    assert len(frames.of("approval_request")) == 1
    result_event = frames.of("event")[3]["event"]
    assert result_event["data"]["is_error"] is True
    assert "denied" in result_event["data"]["content"]


async def test_it_refuses_a_command_whose_approval_times_out(owner, llm, terminal_on):
    llm.script(reply_with_tool("terminal", {"command": "touch marker"}), Reply(text="ok"))
    frames = Frames()
    result = await run_turn(request_for(owner, approval_timeout=0.3), "go", frames)
    assert result.status == "completed"
    [error] = frames.of("error")
    assert "No approval for `touch marker` within 0.3 s" in error["message"]
    request = await ApprovalRequest.objects.aget(owner=owner)
    assert request.status == "expired"
    with pytest.raises(Exception, match="already answered or has expired"):
        await sync_to_async(decide)(owner, request.pk, "once")


async def test_it_lets_trusted_turns_run_commands_without_asking(owner, llm, terminal_on):
    llm.script(reply_with_tool("terminal", {"command": "echo trusted"}), Reply(text="ok"))
    frames = Frames()
    await run_turn(request_for(owner, trusted=True), "go", frames)
    assert frames.of("approval_request") == []
    assert "trusted" in frames.of("event")[3]["event"]["data"]["content"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (reply_with_tool("remember_fact", '{"category": "pref", "key": '), "not valid JSON"),
        (reply_with_tool("remember_fact", "[1, 2]"), "must be a JSON object"),
        (reply_with_tool("remember_fact", {"category": "pref"}), "needs the argument 'key'"),
        (
            reply_with_tool("remember_fact", {"category": 3, "key": "k", "value": "v"}),
            "'category' must be a string",
        ),
        (reply_with_tool("launch_rockets", {}), "Unknown tool 'launch_rockets'"),
        (reply_with_tool("terminal", {"command": "ls"}), "Unknown tool 'terminal'"),  # disabled
        (reply_with_tool("forget_fact", {"category": "x", "key": "y"}), "no fact x/y"),
    ],
)
async def test_it_shows_the_model_its_bad_tool_calls(owner, llm, call, message):
    llm.script(call, Reply(text="Sorry."))
    frames = Frames()
    result = await run_turn(request_for(owner), "go", frames)
    assert result.status == "completed"
    tool_result = frames.of("event")[3]["event"]
    assert tool_result["event_type"] == "tool_result"
    assert tool_result["data"]["is_error"] is True
    assert message in tool_result["data"]["content"]
    assert message in llm.requests[1]["messages"][-1]["content"]


async def test_it_ends_a_turn_at_the_iteration_limit(owner, llm, configure):
    configure("llm", max_iterations=2)
    llm.script(
        reply_with_tool("search_memory", {"query": "tea"}),
        reply_with_tool("search_memory", {"query": "tea"}),
    )
    frames = Frames()
    result = await run_turn(request_for(owner), "loop", frames)
    assert result.status == "max_iterations"
    last = frames.of("event")[-1]["event"]
    assert last["event_type"] == "system"
    assert "after 2 rounds" in last["data"]["content"]


async def test_it_stores_the_message_and_reports_a_dead_endpoint(owner, configure):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure("llm", base_url=f"http://127.0.0.1:{port}/v1")
    frames = Frames()
    result = await run_turn(request_for(owner), "are you there?", frames)
    assert result.status == "error"
    assert [e.event_type for e in await sync_to_async(stored)(owner)] == ["user_message", "error"]
    [error] = frames.of("error")
    assert "Cannot reach the LLM" in error["message"]


async def test_it_keeps_and_marks_the_partial_answer_of_a_cut_stream(owner, llm):
    llm.script(Reply(deltas=["The ", "answer ", "is"], cut_after=2))
    frames = Frames()
    result = await run_turn(request_for(owner), "question", frames)
    assert result.status == "error"
    events = await sync_to_async(stored)(owner)
    assert [e.event_type for e in events] == ["user_message", "assistant_response", "error"]
    assert events[1].data == {
        "content": "The answer ",
        "interrupted": True,
        "reason": "interrupted",
    }
    assert "cut off" in frames.of("error")[0]["message"]


async def test_it_stops_on_request_and_keeps_what_was_said(owner, llm):
    llm.script(Reply(deltas=["slow ", "words ", "keep ", "coming"], delay=0.4))
    frames = Frames()
    task = asyncio.ensure_future(run_turn(request_for(owner), "talk", frames))
    while not frames.of("delta"):
        await asyncio.sleep(0.05)
    task.cancel()
    result = await task
    assert result.status == "stopped"
    events = await sync_to_async(stored)(owner)
    assert [e.event_type for e in events] == ["user_message", "assistant_response", "system"]
    assert events[1].data["interrupted"] is True
    assert events[1].data["content"].startswith("slow ")


async def test_it_expires_a_pending_approval_when_stopped(owner, llm, terminal_on):
    llm.script(reply_with_tool("terminal", {"command": "sleep 1"}))
    frames = Frames()
    task = asyncio.ensure_future(run_turn(request_for(owner), "go", frames))
    while not frames.of("approval_request"):
        await asyncio.sleep(0.05)
    task.cancel()
    assert (await task).status == "stopped"
    assert (await ApprovalRequest.objects.aget(owner=owner)).status == "expired"
    # The next call still gets a valid history: the unanswered call is closed.
    from agent.prompt import build_messages

    messages = await sync_to_async(build_messages)(owner, "s1", "")
    assert messages[-1] == {
        "role": "tool",
        "tool_call_id": messages[-2]["tool_calls"][0]["id"],
        "content": "(not run: interrupted)",
    }


async def test_it_keeps_the_recall_vector_as_the_messages_embedding(owner, llm):
    from memory.embeddings import embed_text
    from memory.vectors import unpack

    await sync_to_async(take_queued_tasks)()
    llm.script(Reply(text="Noted."))
    await run_turn(request_for(owner), "My sister Maya lives in Lisbon", Frames())

    question, answer = await sync_to_async(stored)(owner)
    # Embedded once, for recall, and stored: no job embeds the message again.
    assert question.embedded_at is not None
    expected = await sync_to_async(embed_text)("My sister Maya lives in Lisbon")
    assert float(unpack(question.embedding) @ expected) > 0.999
    queued = await sync_to_async(take_queued_tasks)()
    assert [task["args"] for task in queued] == [([answer.pk],)]


def held_embedding(monkeypatch) -> tuple[asyncio.Event, asyncio.Event]:
    """The message's embedding held: the first event is set when it starts, and it
    ends when the test sets the second."""
    embedding, carry_on = asyncio.Event(), asyncio.Event()

    async def slow_embedding(text: str) -> None:
        embedding.set()
        await carry_on.wait()

    monkeypatch.setattr(runtime, "query_vector", slow_embedding)
    return embedding, carry_on


async def test_it_keeps_a_message_stopped_while_it_was_embedded(owner, llm, monkeypatch):
    embedding, carry_on = held_embedding(monkeypatch)
    task = asyncio.ensure_future(run_turn(request_for(owner), "stop me early", Frames()))
    await embedding.wait()
    task.cancel()
    result = await task
    carry_on.set()
    assert result.status == "stopped" and not llm.requests
    events = await sync_to_async(stored)(owner)
    assert [(e.event_type, e.text) for e in events] == [
        ("user_message", "stop me early"),
        ("system", "Stopped by the user."),
    ]
    assert result.user_event_id == events[0].pk
    assert events[0].data["turn_usage"] == {
        "input": 0,
        "output": 0,
        "cache_read": 0,
        "cache_write": 0,
    }


@pytest.mark.parametrize("behind", [False, True])
async def test_deltas_go_at_once_unless_the_loop_is_behind_then_a_frame_per_tick(
    owner, llm, monkeypatch, behind
):
    # BEHIND is how late a sender may start before the process counts as behind.
    monkeypatch.setattr(answer_stream, "BEHIND", -1.0 if behind else 60.0)
    words = [f"word{n} " for n in range(30)]
    llm.script(Reply(deltas=words, delay=0.003))
    loop = asyncio.get_running_loop()
    sent_at: list[float] = []

    class Timed(Frames):
        async def __call__(self, typed: Any) -> None:
            if typed.as_json()["type"] == "delta":
                sent_at.append(loop.time())
            await super().__call__(typed)

    frames = Timed(owner)
    result = await run_turn(request_for(owner), "Stream me something", frames)

    texts = [f["text"] for f in frames.of("delta")]
    assert "".join(texts) == result.answer == "".join(words)  # none lost or reordered
    assert texts[0] == words[0]  # the first delta does not wait
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent_at)]
    if not behind:  # keeping up: frames as the deltas come, none held for a tick
        assert min(gaps) < answer_stream.DELTA_TICK / 2, gaps
    else:  # behind: the deltas of a tick go together
        assert len(texts) < len(words)
        assert min(gaps) >= answer_stream.DELTA_TICK * 0.99, gaps


# Never silent: what the turn does is said before the answer streams (Status frames).


async def test_it_says_what_it_does_before_the_answer_streams(owner, llm, monkeypatch):
    embedding, carry_on = held_embedding(monkeypatch)
    llm.script(
        reply_with_tool("remember_fact", {"category": "health", "key": "allergy", "value": "nuts"}),
        Reply(deltas=["Noted", "."]),
    )
    frames = Frames()
    task = asyncio.ensure_future(run_turn(request_for(owner), "I am allergic to nuts", frames))
    await embedding.wait()
    # The first sign of life goes out before the embedding is done.
    assert [(f["type"], f["stage"], f["text"]) for f in frames.frames] == [
        ("status", "memory", "Reading memory…")
    ]
    carry_on.set()
    await task

    sequence = [
        f"{f['type']}:{f.get('stage') or f.get('event', {}).get('event_type', '')}"
        for f in frames.frames
        if f["type"] != "delta" or f is frames.of("delta")[0]
    ]
    assert sequence == [
        "status:memory",
        "event:user_message",
        "status:model",
        "event:assistant_response",
        "status:tool",
        "event:tool_call",
        "event:tool_result",
        "status:model",
        "delta:",
        "event:assistant_response",
    ]
    statuses = frames.of("status")
    assert statuses[2] == {
        "type": "status",
        "stage": "tool",
        "text": "Running remember_fact…",
        "tokens": None,
        "tool": "remember_fact",
    }
    # The tokens the model reads: about what it was sent, the tools' schemas too.
    for status, sent in zip([statuses[1], statuses[3]], llm.requests, strict=True):
        estimated = estimate_request_tokens(sent["messages"], sent["tools"])
        assert status["tokens"] > 1000 and abs(status["tokens"] - estimated) < 20
        assert status["text"] == f"The model is reading {status['tokens']:,} tokens…"


async def test_a_turn_that_only_saved_a_fact_says_so(owner, llm):
    llm.script(
        reply_with_tool(
            "remember_fact", {"category": "health", "key": "allergy", "value": "peanuts"}
        ),
        Reply(text=""),
        Reply(text="You are allergic to peanuts."),
    )
    frames = Frames()
    result = await run_turn(request_for(owner), "I'm allergic to peanuts", frames)

    assert result.answer == "Saved: allergy — peanuts"
    answer = (await sync_to_async(stored)(owner))[-1]
    assert answer.data["content"] == "Saved: allergy — peanuts"
    assert answer.data["confirmation"] is True
    # Not the model's words: memory search and recall never find it ...
    assert (answer.text, answer.search_key) == ("", "")
    # The chat's "Remembered: …" notice says it (tests/test_memory_notice.py): not twice.
    assert answer.data["noticed"] is True
    html = await sync_to_async(render_event)(answer)
    assert re.search(r'<li class="event assistant_response[^>]*\shidden>', html)
    assert "bubble" not in html
    assert 'class="pin' not in html and "regenerate" not in html
    # ... and the next prompt goes on from the tool's result, without it.
    await run_turn(request_for(owner), "What can't I eat?", Frames())
    sent = llm.requests[-1]["messages"]
    assert not any("Saved" in (m.get("content") or "") for m in sent)
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        "user",
        "assistant",
        "tool",
        "user",
    ]


def fact(key: str, value: str) -> dict[str, str]:
    return {"category": "person", "key": key, "value": value}


async def test_it_confirms_each_fact_saved_and_each_search(owner, llm):
    llm.script(
        Reply(
            tool_calls=[
                {"name": "remember_fact", "arguments": json.dumps(fact("name", "Ana"))},
                {"name": "remember_fact", "arguments": json.dumps(fact("city_now", "Porto"))},
                {"name": "search_memory", "arguments": json.dumps({"query": "xyzzy"})},
            ]
        ),
        Reply(text="  \n"),
    )
    result = await run_turn(request_for(owner), "I'm Ana, from Porto", Frames())
    found = (await sync_to_async(stored)(owner))[-2]
    hits = len(found.text.splitlines()) if found.text.startswith("[") else 0
    assert result.answer == (
        f"Saved 2 facts: name — Ana; city now — Porto\n\nSearched memory: {hits} result"
        + ("" if hits == 1 else "s")
    )
    # A search has no memory notice: the confirmation is shown, for all three.
    answer = (await sync_to_async(stored)(owner))[-1]
    assert answer.data["noticed"] is False
    assert '<div class="bubble assistant markdown"><p>Saved 2 facts' in (
        await sync_to_async(render_event)(answer)
    )


async def test_a_repeated_call_ends_on_what_it_did_with_the_note_in_the_fold(owner, llm):
    # The embedded model writes its calls as text, and may write the same one again.
    tea = {"category": "pref", "key": "drink", "value": "tea"}
    call = json.dumps({"name": "remember_fact", "arguments": tea})
    llm.script(Reply(text=call), Reply(text=call))
    frames = Frames()
    result = await run_turn(request_for(owner), "I like tea.", frames)

    assert result.answer == "Saved: drink — tea"
    events = await sync_to_async(stored)(owner)
    note, answer = events[-2:]
    assert (note.event_type, answer.event_type) == ("system", "assistant_response")
    assert answer.data["confirmation"] is True
    # The note is in the tool fold, the confirmation is the answer.
    html = await sync_to_async(render_event)(note)
    fold = re.fullmatch(
        r'<li class="event system"[^>]*>\s*<details class="tool[^"]*">(.*?)</details>.*', html, re.S
    )
    assert fold is not None and "asked for remember_fact again" in fold.group(1)
    assert '<p class="note">' not in html
    # The call that ran is told by the chat's "Remembered: tea" notice: no second bubble.
    assert answer.data["noticed"] is True
    assert "bubble" not in await sync_to_async(render_event)(answer)


async def test_forgetting_the_fact_forgets_what_the_turn_said_it_saved(owner, llm):
    from core.history import Actor
    from memory.forgetting import forget_facts

    peanuts = {"category": "health", "key": "allergy", "value": "peanuts"}
    tea = {"category": "pref", "key": "drink", "value": "tea"}
    llm.script(
        Reply(
            tool_calls=[
                {"name": "remember_fact", "arguments": json.dumps(peanuts)},
                {"name": "remember_fact", "arguments": json.dumps(tea)},
            ]
        ),
        Reply(text=""),
    )
    await run_turn(request_for(owner), "Peanuts, no; tea, yes.", Frames())

    facts = Fact.objects.filter(owner=owner, key="allergy")
    await sync_to_async(forget_facts)(owner, facts, Actor.user(owner))
    answer = (await sync_to_async(stored)(owner))[-1]
    assert answer.data["confirmation"] and "peanuts" not in str(answer.data)


def test_a_confirmation_names_any_tool_and_what_failed():
    from agent.tools import Ran
    from agent.tools.confirmation import confirmation

    said = confirmation(
        [
            Ran("weather", {"city": "Porto"}, "sunny"),
            Ran("remember_fact", {}, error="The user denied this call."),
            Ran("weather", {"city": "Lisbon"}, "rain"),
            Ran("append_memory_file", {"path": "MEMORY.md", "text": "x"}, "Appended"),
        ]
    )
    assert said == (
        "Ran weather 2 times\n\nAdded to MEMORY.md\n\n"
        "remember_fact failed: The user denied this call."
    )
    # A value that holds its key is said once (the embedded Qwen's key "Pixel").
    pixel = {"category": "phone", "key": "Pixel", "value": "Pixel 8"}
    assert confirmation([Ran("remember_fact", pixel, "Remembered")]) == "Saved: Pixel 8"
