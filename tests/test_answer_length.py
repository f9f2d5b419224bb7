"""Answers are bounded: `[llm] max_answer_tokens` goes with every request, and an
answer the limit cut is shown as cut (issue 24, attack 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from agent.llm import LLMClient, configured_endpoint
from agent.prompt import build_messages, message_tokens
from agent.runtime import TurnRequest, run_turn
from core.config import ConfigError, load_config
from memory import recording
from memory.models import Event, EventType
from sessions_app.broadcast import render_event
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.websocket import ignore

MESSAGES = [{"role": "user", "content": "Hi"}]


def test_it_defaults_to_2048_answer_tokens():
    assert load_config(None, {})["llm"]["max_answer_tokens"] == 2048


async def test_it_sends_max_tokens_with_every_request(llm, configure):
    configure("llm", max_answer_tokens=321)
    llm.script(Reply(text="one"), Reply(text="two"))
    await LLMClient(configured_endpoint()).stream(MESSAGES)
    await LLMClient(configured_endpoint(fast=True)).stream(MESSAGES)
    assert [request["max_tokens"] for request in llm.requests] == [321, 321]


@pytest.mark.django_db(transaction=True)
async def test_it_sends_max_tokens_in_each_round_of_a_turn(llm, configure):
    owner = await User.objects.acreate(username="owner")
    configure("llm", max_answer_tokens=500)
    llm.script(
        reply_with_tool("remember_fact", {"category": "pref", "key": "k", "value": "v"}),
        Reply(text="Saved."),
    )
    await run_turn(TurnRequest(owner=owner, session_id="s1"), "Remember this", ignore)
    assert [request["max_tokens"] for request in llm.requests] == [500, 500]


@pytest.mark.django_db(transaction=True)
async def test_it_marks_an_answer_the_limit_cut(llm):
    owner = await User.objects.acreate(username="owner")
    llm.script(Reply(text="The first half of a long", finish="length"))
    result = await run_turn(TurnRequest(owner=owner, session_id="s1"), "Write a lot", ignore)
    assert result.status == "completed"
    answer = await Event.objects.aget(owner=owner, event_type=EventType.ASSISTANT_RESPONSE)
    assert answer.data["finish_reason"] == "length"
    html = render_event(answer)
    assert "The first half of a long" in html
    # Said in the user's words; the setting that sets the limit only in the tooltip.
    assert ">The answer was cut off at its length limit.</p>" in html
    assert 'title="The limit is [llm] max_answer_tokens in config.toml."' in html


@pytest.mark.django_db
def test_it_does_not_mark_an_answer_that_ended_by_itself(alice):
    answer = Event.objects.create(
        owner=alice,
        session_id="s1",
        event_type=EventType.ASSISTANT_RESPONSE,
        data={"content": "Done.", "finish_reason": "stop"},
    )
    assert "cut off" not in render_event(answer)


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_answer_tokens = 0", "[llm] max_answer_tokens must be at least 16 (got 0)"),
        ("max_answer_tokens = 'many'", "[llm] max_answer_tokens must be a whole number"),
        ("max_answer_tokens = 1.5", "[llm] max_answer_tokens must be a whole number"),
        (
            "max_answer_tokens = 4097",
            "[llm] max_answer_tokens must be at most half of [llm] context_window (4096 of 8192)",
        ),
        (
            "context_window = 2048",
            "[llm] max_answer_tokens must be at most half of [llm] context_window (1024 of 2048), "
            "to leave room for the prompt (got 2048)",
        ),
    ],
)
def test_it_refuses_a_bad_max_answer_tokens_at_start(tmp_path: Path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(f"[llm]\n{text}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert message in str(info.value)


def test_it_accepts_answers_of_up_to_half_the_window(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text("[llm]\ncontext_window = 2048\nmax_answer_tokens = 1024\n")
    assert load_config(path, {})["llm"]["max_answer_tokens"] == 1024
    assert (
        load_config(None, {"NEOTASK_LLM_MAX_ANSWER_TOKENS": "4096"})["llm"]["max_answer_tokens"]
        == 4096
    )


@pytest.mark.parametrize(
    "value, message",
    [
        ("lots", "NEOTASK_LLM_MAX_ANSWER_TOKENS must be a whole number, not 'lots'"),
        ("-5", "NEOTASK_LLM_MAX_ANSWER_TOKENS must be at least 16 (got -5)"),
        ("5000", "NEOTASK_LLM_MAX_ANSWER_TOKENS must be at most half of [llm] context_window"),
    ],
)
def test_it_refuses_a_bad_max_answer_tokens_variable(value, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, {"NEOTASK_LLM_MAX_ANSWER_TOKENS": value})
    assert message in str(info.value)


@pytest.mark.django_db
def test_it_leaves_room_in_the_window_for_the_longest_answer(alice, configure):
    configure("llm", context_window=4096, max_answer_tokens=2048)
    for number in range(10):  # about 250 tokens each, within the recency limit
        content = f"message {number} " + "x" * 1000
        recording.record(alice, "s1", EventType.USER_MESSAGE, {"content": content}, embed=False)
    messages = build_messages(alice, "s1", "Be brief.")
    assert 1 < len(messages) < 11
    assert sum(message_tokens(message) for message in messages) <= 4096 - 2048
