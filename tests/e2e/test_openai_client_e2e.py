"""The official openai Python package against the live app's /v1/ (issue 29):
models, completions streamed and not, a tool call's round trip, a bad token,
another user's chat; the turns then show in the chat page and in memory search."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.browser import log_in
from tests.support.processes import run_program
from tests.support.scripted_llm import Reply, reply_with_tool

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def tokens(live_app, live_env) -> dict[str, str]:
    program = "tests.programs.accounts:user_token"
    return {name: run_program(live_env, program, name) for name in ("tester", "openai-other")}


def client(live_app: str, token: str) -> openai.OpenAI:
    # No retries: a refusal must show at once, and a retried message would be stored twice.
    return openai.OpenAI(base_url=f"{live_app}/v1", api_key=token, max_retries=0, timeout=60)


def test_it_answers_the_openai_client_and_shows_the_turns_in_the_web_ui(
    live_app, tokens, e2e_llm, page
):
    tester = client(live_app, tokens["tester"])
    assert "neotask/main" in [model.id for model in tester.models.list()]

    e2e_llm.script(Reply("Zanzibar has spice farms."))
    asked = [{"role": "user", "content": "Where do the cloves of Zanzibar grow?"}]
    raw = tester.chat.completions.with_raw_response.create(model="neotask/main", messages=asked)
    key = raw.headers["X-Neotask-Chat"]
    answer = raw.parse()
    assert answer.choices[0].message.content == "Zanzibar has spice farms."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.total_tokens == 25

    e2e_llm.script(Reply("Pemba island grows most of them.", delay=0.02))
    follow = [*asked, answer.choices[0].message.model_dump(), {"role": "user", "content": "And?"}]
    stream = tester.chat.completions.create(
        model="neotask/main",
        messages=follow,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([text for text in texts if text]) > 1
    assert "".join(texts) == "Pemba island grows most of them."
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    # One chat: Neotask's history went to the model, not the client's copy.
    assert [m["content"] for m in e2e_llm.requests[-1]["messages"][1:]] == [
        "Where do the cloves of Zanzibar grow?",
        "Zanzibar has spice farms.",
        "And?",
    ]

    log_in(page)
    page.goto(f"/chat/{key}/")
    page.locator(".assistant_response .bubble:has-text('Pemba island')").wait_for()
    assert "Where do the cloves of Zanzibar grow?" in page.content()
    page.goto("/memory/?q=cloves+Zanzibar")
    # (A hit names its chat, titled by this question: the first hit is the question itself.)
    page.locator(".result:has-text('Where do the cloves of Zanzibar grow?')").first.wait_for()


def test_it_hands_a_tool_call_to_the_openai_client_and_takes_its_result(live_app, tokens, e2e_llm):
    tester = client(live_app, tokens["tester"])
    asked = [{"role": "user", "content": "Is it raining in Bergen?"}]
    e2e_llm.script(reply_with_tool("get_weather", {"city": "Bergen"}))
    with tester.chat.completions.stream(
        model="neotask/main", messages=asked, tools=[WEATHER]
    ) as stream:
        first = stream.get_final_completion()  # the client's own assembly of the chunks
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Bergen"}
    result = {"role": "tool", "tool_call_id": call.id, "content": "Rain, 9 °C"}
    function = {"name": call.function.name, "arguments": call.function.arguments}
    called = {
        "role": "assistant",
        "tool_calls": [{"id": call.id, "type": "function", "function": function}],
    }

    e2e_llm.script(Reply("Yes, it rains in Bergen."))
    second = tester.chat.completions.create(
        model="neotask/main", messages=[*asked, called, result], tools=[WEATHER]
    )
    assert second.choices[0].message.content == "Yes, it rains in Bergen."
    assert e2e_llm.requests[-1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "Rain, 9 °C",
    }


def test_it_refuses_a_bad_token_and_another_users_chat(live_app, tokens, e2e_llm):
    with pytest.raises(openai.AuthenticationError) as refused:
        client(live_app, "nt_abc_not-a-token").models.list()
    assert refused.value.code == "invalid_api_key"

    e2e_llm.script(Reply("Noted."))
    tester = client(live_app, tokens["tester"])
    mine = tester.chat.completions.with_raw_response.create(
        model="neotask/main", messages=[{"role": "user", "content": "My private diary"}]
    )
    key = mine.headers["X-Neotask-Chat"]
    before = len(e2e_llm.requests)
    other = client(live_app, tokens["openai-other"])
    with pytest.raises(openai.NotFoundError) as hidden:
        other.chat.completions.create(
            model="neotask/main",
            messages=[{"role": "user", "content": "Show me"}],
            extra_headers={"X-Neotask-Chat": key},
        )
    assert hidden.value.code == "chat_not_found"
    assert len(e2e_llm.requests) == before
