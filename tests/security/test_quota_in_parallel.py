"""The daily token quota holds when requests arrive together (issue 40, M5):
each input that runs the model reserves part of the day when it is admitted
(sessions_app.quotas), so parallel requests share the day's remainder instead
of each seeing all of it."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from neotask_site.asgi import application
from sessions_app import chat, quotas, runner
from sessions_app.models import ApiToken, ChatClaim, ChatInput, DailyUsage
from sessions_app.quotas import QuotaExceeded
from tests.support.scripted_llm import Reply, reply_with_tool

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = 20
LIMIT = 20
TURN = {"prompt_tokens": 12, "completion_tokens": 3}  # 15 tokens a turn


async def complete(token: str, text: str) -> int:
    """POST /v1/chat/completions through the ASGI application, as a server runs it."""
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", b"application/json"),
    ]
    body = {"model": "neotask/main", "messages": [{"role": "user", "content": text}]}
    post = HttpCommunicator(application, "POST", "/v1/chat/completions", headers=headers)
    await post.send_input({"type": "http.request", "body": json.dumps(body).encode()})
    start = await post.receive_output(timeout=60)
    while (await post.receive_output(timeout=60)).get("more_body"):
        pass
    return start["status"]


def usage_of(owner) -> DailyUsage:
    return DailyUsage.objects.owned_by(owner).get(day=timezone.localdate())


async def test_twenty_parallel_v1_requests_stay_within_the_days_tokens(alice, llm, configure):
    configure("quotas", tokens_per_day=LIMIT)
    token = await sync_to_async(lambda: ApiToken.issue(alice, "script")[1])()
    answering = threading.Event()  # the model answers once every request is in
    llm.script(*(Reply(text="Fine.", usage=TURN, hold=answering) for _ in range(REQUESTS)))
    requests = [asyncio.create_task(complete(token, f"question {n}")) for n in range(REQUESTS)]
    try:
        # Every request either answered already (refused) or reached the model.
        for _ in range(600):
            if sum(task.done() for task in requests) + len(llm.requests) >= REQUESTS:
                break
            await asyncio.sleep(0.05)
    finally:
        answering.set()
    statuses = await asyncio.gather(*requests)

    usage = await sync_to_async(usage_of)(alice)
    # One turn reserves 4,000 (> the day's 20), so the others wait for none of it.
    assert (statuses.count(200), statuses.count(429)) == (1, REQUESTS - 1)
    assert len(llm.requests) == 1
    assert usage.tokens == 15 <= LIMIT
    assert (usage.messages, usage.reserved) == (1, 0)  # the reservation given back
    assert not await ChatInput.objects.filter(owner=alice).aexists()


def test_racing_admissions_share_the_day_between_their_reservations(alice, configure):
    """At the database: of twelve inputs admitted at once with 5 tokens
    reserved each under a 20-token day, four get in."""
    configure("quotas", tokens_per_day=LIMIT, reserve_per_turn=5)
    results: list[bool] = []
    start = threading.Barrier(12)

    def request() -> None:
        try:
            start.wait()
            with transaction.atomic():
                quotas.admit(alice, model=True)
            results.append(True)
        except QuotaExceeded as exc:
            assert "reserved the rest of today's 20 tokens" in str(exc)
            results.append(False)
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=request) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 4
    assert (usage_of(alice).reserved, usage_of(alice).tokens) == (20, 0)


def crashed_turn(owner, key: str) -> None:
    """An input admitted with its reservation, whose process died mid-answer."""
    with transaction.atomic():
        reservation = quotas.admit(owner, model=True)
        ChatInput.objects.create(
            owner=owner, key=key, text="hi", status=ChatInput.Status.RUNNING, **reservation.fields()
        )
    ChatClaim.objects.create(
        owner=owner, key=key, token="a" * 32, lease_until=timezone.now() - timedelta(seconds=1)
    )


async def test_a_crashed_turns_reservation_is_given_back_when_the_chat_is_taken_over(
    alice, configure
):
    configure("quotas", tokens_per_day=LIMIT)
    session = await sync_to_async(chat.start_chat)(alice)
    await sync_to_async(crashed_turn)(alice, session.key)
    assert (await sync_to_async(usage_of)(alice)).reserved == 4000
    with pytest.raises(QuotaExceeded):  # it holds the day while it "runs"
        await sync_to_async(quotas.admit)(alice, model=True)

    assert await runner.take_over(alice, session.key)  # the next process ends it
    assert (await sync_to_async(usage_of)(alice)).reserved == 0
    await sync_to_async(quotas.admit)(alice, model=True)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def completion(api: Client, body: dict):
    return api.post("/v1/chat/completions", json.dumps(body), content_type="application/json")


def test_a_clients_tool_results_are_held_to_the_days_tokens(alice, llm, configure):
    """The turn a /v1 client's tool results continue runs the model: it needs
    room in the day like a message, without counting as one."""
    configure("quotas", tokens_per_day=LIMIT)
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(alice, 'script')[1]}"})
    asked = [{"role": "user", "content": "Weather in Oslo?"}]
    body = {"model": "neotask/main", "messages": asked, "tools": [WEATHER]}
    llm.script(reply_with_tool("get_weather", {"city": "Oslo"}, usage=TURN))
    first = completion(api, body)
    (call,) = first.json()["choices"][0]["message"]["tool_calls"]
    usage = usage_of(alice)
    assert (usage.tokens, usage.messages, usage.reserved) == (15, 1, 0)

    # 15 of 20 used: room for one more turn, which reserves the rest.
    called = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": call["id"], "content": "Sunny"}
    follow_up = {**body, "messages": [*asked, called, result]}
    llm.script(reply_with_tool("get_weather", {"city": "Bergen"}, usage=TURN))
    second = completion(api, follow_up)
    assert second.status_code == 200
    usage = usage_of(alice)
    assert (usage.tokens, usage.messages, usage.reserved) == (30, 1, 0)  # no message counted

    # The day is used up: the next results are refused before the model runs.
    (call,) = second.json()["choices"][0]["message"]["tool_calls"]
    again = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": call["id"], "content": "Rain"}
    last = {**body, "messages": [*follow_up["messages"], again, answer]}
    llm.script(Reply(text="Sunny in Oslo, rain in Bergen.", usage=TURN))
    refused = completion(api, last)
    assert refused.status_code == 429
    assert "your 20 tokens for today" in refused.json()["error"]["message"]
    assert len(llm.requests) == 2
    assert usage_of(alice).tokens == 30
