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
from django.utils import timezone

from neotask_site.asgi import application
from sessions_app import chat, quotas, runner
from sessions_app.models import ApiToken, ChatClaim, ChatInput, DailyUsage
from sessions_app.quotas import QuotaExceeded
from tests.support.scripted_llm import Reply

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
