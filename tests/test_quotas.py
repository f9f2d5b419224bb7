"""Quotas (sessions_app.quotas): messages per minute and tokens per day, per user
and per group, on every entry point; a refused input is never stored."""

from __future__ import annotations

import json
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, Permission, User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from core.config import ConfigError, load_config
from memory.models import Event, EventType
from scheduler import due_tasks
from sessions_app import chat, quotas
from sessions_app.models import ApiToken, ChatClaim, ChatInput, DailyUsage, GroupQuota, Session
from sessions_app.quotas import Limits, QuotaExceeded
from tests.support.records import make_task
from tests.support.scripted_llm import Reply
from tests.support.web import client_for
from tests.support.websocket import connect, kinds, receive, send, stored, until

pytestmark = pytest.mark.django_db(transaction=True)


def api_for(user: User) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(user, 'script')[1]}"})


def post_message(client: Client, session: Session, text: str):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages",
        json.dumps({"text": text}),
        content_type="application/json",
    )


def stored_messages(owner: User) -> list[str]:
    events = Event.objects.owned_by(owner).filter(event_type=EventType.USER_MESSAGE)
    return [event.text for event in events.order_by("id")]


def usage_of(owner: User) -> DailyUsage:
    return DailyUsage.objects.owned_by(owner).get(day=timezone.localdate())


def admitted(owner: User, times: int, *, paced: bool = True) -> int:
    """How many of `times` inputs `owner` may send now, each in its own transaction."""
    count = 0
    for _ in range(times):
        try:
            with transaction.atomic():
                quotas.admit(owner, paced=paced)
            count += 1
        except QuotaExceeded:
            pass
    return count


# The API ---------------------------------------------------------------------------


def test_it_answers_the_api_429_with_retry_after_over_the_minute_limit(alice, llm, configure):
    configure("quotas", messages_per_minute=2)
    session = chat.start_chat(alice)
    api = api_for(alice)
    llm.script(Reply(text="One."), Reply(text="Two."))
    assert post_message(api, session, "first").status_code == 200
    assert post_message(api, session, "second").status_code == 200

    response = post_message(api, session, "third")
    assert response.status_code == 429
    body = response.json()
    assert body["limit"] == "messages_per_minute"
    assert 1 <= body["retry_after"] <= 60
    assert response["Retry-After"] == str(body["retry_after"])
    assert body["error"] == (
        f"You've sent 2 messages this minute; try again in {body['retry_after']} s."
    )
    # Refused before it was stored: not in the chat, not queued, not sent to the model,
    # and the chat's claim not taken.
    assert stored_messages(alice) == ["first", "second"]
    assert not ChatInput.objects.owned_by(alice).exists()
    assert not ChatClaim.objects.owned_by(alice).exclude(token="").exists()
    assert len(llm.requests) == 2
    assert usage_of(alice).messages == 2


def test_it_refuses_new_messages_once_the_days_tokens_are_used(alice, llm, configure):
    configure("quotas", tokens_per_day=20)
    session = chat.start_chat(alice)
    api = api_for(alice)
    llm.script(Reply(text="Long answer.", usage={"prompt_tokens": 30, "completion_tokens": 3}))
    assert post_message(api, session, "first").status_code == 200
    assert usage_of(alice).tokens == 33

    response = post_message(api, session, "second")
    assert response.status_code == 429
    body = response.json()
    assert body["limit"] == "tokens_per_day"
    until_midnight = quotas.seconds_to_next_day(timezone.now())
    assert until_midnight - 5 <= body["retry_after"] <= until_midnight
    assert "your 20 tokens for today" in body["error"]
    assert stored_messages(alice) == ["first"]


# The websocket ---------------------------------------------------------------------


async def test_it_hands_a_refused_chat_message_back_in_an_error_frame(alice, llm, configure):
    configure("quotas", messages_per_minute=1)
    session = await sync_to_async(chat.start_chat)(alice)
    llm.script(Reply(text="Hello."))
    ws = await connect(alice, session.key)
    await send(ws, type="message", text="first")
    await until(ws)
    await send(ws, type="message", text="second, not lost")
    frame = await receive(ws)
    assert frame["type"] == "error"
    assert frame["limit"] == "messages_per_minute"
    assert frame["text"] == "second, not lost"
    assert frame["message"] == (
        f"You've sent 1 messages this minute; try again in {frame['retry_after']} s."
    )
    assert 1 <= frame["retry_after"] <= 60
    # /help answers at once and costs the model nothing: never refused.
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"
    await ws.disconnect()
    assert await sync_to_async(stored_messages)(alice) == ["first"]
    assert not await ChatInput.objects.filter(owner=alice).aexists()


async def test_it_counts_retries_but_not_a_bare_new(alice, llm, configure):
    configure("quotas", messages_per_minute=1)
    session = await sync_to_async(chat.start_chat)(alice)
    ws = await connect(alice, session.key)
    await send(ws, type="message", text="will fail")  # nothing scripted: the LLM answers 500
    failed = stored(await until(ws), "error")
    await send(ws, type="retry", event_id=failed["id"])
    frame = await receive(ws)
    assert (frame["type"], frame["limit"], frame["text"]) == ("error", "messages_per_minute", "")
    await send(ws, type="message", text="/new")  # a fresh session, no model work
    assert "error" not in kinds(await until(ws))
    await ws.disconnect()
    assert (await sync_to_async(usage_of)(alice)).messages == 1


# Who gets which limits -------------------------------------------------------------


def test_it_gives_the_most_generous_of_the_users_groups(alice, bob, configure):
    configure("quotas", messages_per_minute=1, tokens_per_day=100)
    for name, per_minute, per_day in [("a", 3, 1000), ("b", 5, 0), ("c", 4, 50)]:
        group = Group.objects.create(name=name)
        GroupQuota.objects.create(
            group=group, messages_per_minute=per_minute, tokens_per_day=per_day
        )
        group.user_set.add(alice)
    bob.groups.add(Group.objects.create(name="no quota"), Group.objects.get(name="c"))
    assert quotas.limits_for(alice) == Limits(messages_per_minute=5, tokens_per_day=0)
    assert quotas.limits_for(bob) == Limits(messages_per_minute=4, tokens_per_day=50)
    assert admitted(alice, 7) == 5


def test_a_change_of_limits_or_groups_applies_to_the_next_input(alice, configure):
    configure("quotas", messages_per_minute=1)
    assert admitted(alice, 2) == 1  # the limits are kept in this process from here
    heavy = Group.objects.create(name="heavy")
    heavy.user_set.add(alice)  # a group without a quota: still the defaults
    assert admitted(alice, 1) == 0
    quota = GroupQuota.objects.create(group=heavy, messages_per_minute=3)
    assert admitted(alice, 3) == 2
    quota.messages_per_minute = 4
    quota.save()
    assert admitted(alice, 2) == 1
    alice.groups.remove(heavy)
    assert quotas.limits_for(alice) == Limits(messages_per_minute=1)
    alice.groups.add(heavy)
    heavy.delete()  # its quota with it
    assert quotas.limits_for(alice) == Limits(messages_per_minute=1)


def test_another_process_sees_a_change_of_limits_within_seconds(alice, monkeypatch):
    monkeypatch.setattr(quotas.GROUP_LIMITS, "seconds", 0.2)
    quota = GroupQuota.objects.create(group=Group.objects.create(name="g"), tokens_per_day=9)
    alice.groups.add(quota.group)
    assert quotas.limits_for(alice).tokens_per_day == 9
    # Another process's change: no signal here.
    GroupQuota.objects.filter(pk=quota.pk).update(tokens_per_day=7)
    assert quotas.limits_for(alice).tokens_per_day == 9  # kept a moment
    time.sleep(0.25)
    assert quotas.limits_for(alice).tokens_per_day == 7


def test_it_holds_users_without_a_group_quota_to_the_defaults(alice, configure):
    configure("quotas", messages_per_minute=2, tokens_per_day=100)
    alice.groups.add(Group.objects.create(name="no quota"))
    assert quotas.limits_for(alice) == Limits(2, 100)
    assert admitted(alice, 3) == 2


def test_it_exempts_superusers_but_counts_their_usage(db, configure):
    configure("quotas", messages_per_minute=1, tokens_per_day=1)
    root = User.objects.create_superuser("root")
    assert admitted(root, 3) == 3
    quotas.add_tokens(root.pk, 500)
    assert admitted(root, 1) == 1
    assert (usage_of(root).messages, usage_of(root).tokens) == (4, 500)


def test_it_keeps_each_users_quota_apart(alice, bob, configure):
    configure("quotas", messages_per_minute=2, tokens_per_day=100)
    assert admitted(alice, 3) == 2
    quotas.add_tokens(alice.pk, 100)
    assert admitted(bob, 2) == 2  # alice's full minute and day are not bob's
    assert (usage_of(alice).messages, usage_of(alice).tokens) == (2, 100)
    assert (usage_of(bob).messages, usage_of(bob).tokens) == (2, 0)


def test_it_lets_only_the_limit_through_when_requests_race(alice, configure):
    configure("quotas", messages_per_minute=3)
    results: list[bool] = []
    start = threading.Barrier(6)

    def request() -> None:
        try:
            start.wait()
            results.append(admitted(alice, 1) == 1)
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=request) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, False, False, True, True, True]
    assert usage_of(alice).messages == 3


def test_it_opens_a_new_minute_after_the_last_one_closed(alice, configure, monkeypatch):
    configure("quotas", messages_per_minute=1)
    now = timezone.now()
    with transaction.atomic():
        quotas.admit(alice, now=now)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.admit(alice, now=now + timezone.timedelta(seconds=45))
    assert refused.value.retry_after == 15
    quotas.admit(alice, now=now + timezone.timedelta(seconds=60))
    assert usage_of(alice).messages == 2


# Scheduled tasks -------------------------------------------------------------------


def test_it_counts_scheduled_runs_without_holding_them_to_the_minute(alice, llm, configure):
    configure("quotas", messages_per_minute=1, tokens_per_day=50)
    assert admitted(alice, 1) == 1  # her minute is full
    task = make_task(alice)
    llm.script(Reply(text="Your todos.", usage={"prompt_tokens": 40, "completion_tokens": 10}))
    assert due_tasks.run_task(task, timezone.now()).status == "completed"
    assert (usage_of(alice).messages, usage_of(alice).tokens) == (2, 50)

    # The day's tokens are used: the next run is refused, said so, and stores nothing.
    run = due_tasks.run_task(task, timezone.now())
    assert run.status == "failed"
    assert "did not run" in run.detail and "tokens for today" in run.detail
    errors = Event.objects.owned_by(alice).filter(event_type=EventType.ERROR)
    assert [event.data["kind"] for event in errors] == ["task_refused"]
    assert stored_messages(alice) == ["summarise my open todos"]
    assert not ChatInput.objects.owned_by(alice).exists()


# Configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        (
            "[quotas]\nmessages_per_minute = -1\n",
            {},
            "[quotas] messages_per_minute must be at least 0",
        ),
        (
            '[quotas]\ntokens_per_day = "lots"\n',
            {},
            "[quotas] tokens_per_day must be a whole number",
        ),
        ("[quotas]\ntokens_per_day = 1.5\n", {}, "must be a whole number"),
        (
            "",
            {"NEOTASK_QUOTAS_MESSAGES_PER_MINUTE": "ten"},
            "NEOTASK_QUOTAS_MESSAGES_PER_MINUTE must",
        ),
        (
            "",
            {"NEOTASK_QUOTAS_TOKENS_PER_DAY": "-5"},
            "NEOTASK_QUOTAS_TOKENS_PER_DAY must be at least 0",
        ),
    ],
)
def test_it_names_a_bad_quota_setting(tmp_path, text, environ, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ)
    assert message in str(info.value)


def test_it_reads_quotas_from_the_file_and_lets_the_environment_win(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[quotas]\nmessages_per_minute = 10\ntokens_per_day = 100000\n")
    assert load_config(path, {})["quotas"] == {
        "messages_per_minute": 10,
        "tokens_per_day": 100000,
        "reserve_per_turn": 4000,
    }
    environ = {"NEOTASK_QUOTAS_TOKENS_PER_DAY": "5000", "NEOTASK_QUOTAS_RESERVE_PER_TURN": "800"}
    assert load_config(path, environ)["quotas"]["tokens_per_day"] == 5000
    assert load_config(path, environ)["quotas"]["reserve_per_turn"] == 800
    assert load_config(None, {})["quotas"] == {
        "messages_per_minute": 0,
        "tokens_per_day": 0,
        "reserve_per_turn": 4000,
    }


# The admin -------------------------------------------------------------------------

USAGE_PAGE = "/admin/sessions_app/dailyusage/"


def test_it_shows_usage_by_day_to_staff_only(alice, bob, configure):
    quotas.add_tokens(alice.pk, 123_457)
    quotas.add_tokens(bob.pk, 765_432)
    root = User.objects.create_superuser("root")
    page = client_for(root).get(USAGE_PAGE).content.decode()
    assert "123457" in page and "765432" in page and ">alice<" in page

    response = client_for(alice).get(USAGE_PAGE)  # not staff
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")

    bob.is_staff = True
    bob.save()
    bob.user_permissions.add(Permission.objects.get(codename="view_dailyusage"))
    page = client_for(bob).get(USAGE_PAGE).content.decode()
    assert "765432" in page and "123457" not in page  # staff see their own


def test_it_sets_a_groups_quota_in_the_admin(db):
    root = User.objects.create_superuser("root")
    response = client_for(root).post(
        "/admin/auth/group/add/",
        {
            "name": "heavy users",
            "quota-TOTAL_FORMS": "1",
            "quota-INITIAL_FORMS": "0",
            "quota-MIN_NUM_FORMS": "0",
            "quota-MAX_NUM_FORMS": "1",
            "quota-0-messages_per_minute": "30",
            "quota-0-tokens_per_day": "2000000",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    quota = GroupQuota.objects.get(group__name="heavy users")
    assert (quota.messages_per_minute, quota.tokens_per_day) == (30, 2_000_000)
