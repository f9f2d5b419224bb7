"""Where a memory came from: a fact links the turn, message, summary or import it
came from; a summary links the events it condensed; the facts page and /status
say "from <chat>, <date>" with a link that finds the turn in its chat."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agent.consolidation_job import run
from agent.runtime import TurnRequest, run_turn
from agent.tools import ToolContext, call_tool
from core.history import Actor
from importers.aidaemon import run as import_aidaemon_database
from importers.report import ImportReport
from memory import recording
from memory.fulltext import ensure_index
from memory.models import Event, EventType, Fact
from memory.provenance import provenance_of
from sessions_app import chat
from sessions_app.meter import fact_lines
from sessions_app.models import ApiToken, Session
from sessions_app.views import EVENTS_PER_PAGE
from tests.support.consolidation import answer, chat_yesterday
from tests.support.imports import build_db
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.websocket import ignore

TEA = {"category": "Pref", "key": "Drink", "value": "tea"}


def remember(owner, session: Session, **fields) -> Fact:
    values = {
        "actor": Actor.agent("main"),
        "source": Fact.Source.AGENT,
        "origin": Fact.Origin.TURN,
        "origin_session_id": str(session.pk),
        **fields,
    }
    return Fact.objects.remember(owner, "pref", "drink", "tea", **values)[0]


@pytest.mark.django_db(transaction=True)
async def test_it_links_an_agents_fact_to_the_tool_call_that_made_it(owner, llm):
    llm.script(reply_with_tool("remember_fact", TEA), Reply(text="Noted."))
    await run_turn(TurnRequest(owner=owner, session_id="s1"), "I drink tea", ignore)
    call = await Event.objects.aget(owner=owner, event_type=EventType.TOOL_CALL)
    fact = await Fact.objects.aget(owner=owner)
    assert (fact.origin, fact.origin_event_id, fact.origin_session_id) == (
        Fact.Origin.TURN,
        call.pk,
        "s1",
    )
    assert fact.source == Fact.Source.AGENT


@pytest.mark.django_db(transaction=True)  # the tool runs in a thread of its own
async def test_it_links_a_remember_typed_by_the_user_to_their_chat(alice):
    session = await database_sync_to_async(chat.start_chat)(alice)
    context = ToolContext(alice, str(session.pk), "main", Path("/tmp"), by_person=True)
    output = await call_tool(context, "remember_fact", json.dumps(TEA))
    assert not output.error
    fact = await Fact.objects.aget(owner=alice)
    assert (fact.origin, fact.origin_event_id, fact.origin_session_id, fact.source) == (
        Fact.Origin.MESSAGE,
        None,
        str(session.pk),
        Fact.Source.USER,
    )


def test_it_links_a_summary_to_the_events_it_condensed_and_its_facts_to_it(alice, llm):
    events = chat_yesterday(alice)
    other = chat_yesterday(alice, session="s2", texts=("unrelated",))
    llm.script(
        answer("Alice moved to Porto.", ("place", "home_city", "Porto")),
        answer("Nothing much."),
    )
    run()
    summary = Event.objects.get(event_type=EventType.SUMMARY, session_id="s1")
    assert set(summary.condensed.all()) == set(events)
    assert list(events[0].summaries.all()) == [summary]
    assert not other[0].summaries.exclude(session_id="s2").exists()
    fact = Fact.objects.get(owner=alice, key="home_city")
    assert (fact.origin, fact.origin_event, fact.origin_session_id) == (
        Fact.Origin.CONSOLIDATION,
        summary,
        "s1",
    )


def test_it_marks_an_imported_fact_with_its_import(alice, tmp_path):
    path = build_db(tmp_path / "aidaemon.db")
    import_aidaemon_database(path, alice, "main", ImportReport(), lambda count: None)
    fact = Fact.objects.filter(owner=alice).first()
    assert fact is not None
    assert (fact.origin, fact.origin_label, fact.origin_event) == (
        Fact.Origin.IMPORT,
        "aidaemon import aidaemon.db",
        None,
    )


def test_it_tells_where_each_fact_came_from(alice):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Trip to Osaka")
    turn = recording.record(alice, str(session.pk), EventType.TOOL_CALL, {"name": "remember_fact"})
    noon = datetime(2026, 3, 4, 12, tzinfo=UTC)
    Event.objects.filter(pk=turn.pk).update(created_at=noon)
    linked = remember(alice, session, origin_event_id=turn.pk)
    imported, _ = Fact.objects.remember(
        alice,
        "pref",
        "food",
        "rice",
        actor=Actor.importing("aidaemon import x.db"),
        source=Fact.Source.AGENT,
        origin=Fact.Origin.IMPORT,
        origin_label="aidaemon import x.db",
    )
    unknown = Fact.objects.create(owner=alice, category="pref", key="old", value="stored long ago")
    facts = list(Fact.objects.filter(owner=alice).select_related("origin_event"))
    told = provenance_of(facts)
    assert told[linked.pk].text == "from “Trip to Osaka”, 4 Mar 2026"
    assert told[linked.pk].url == reverse("event-source", args=[turn.pk])
    assert told[imported.pk].text.startswith("from aidaemon import x.db, ")
    assert told[imported.pk].url == ""
    assert unknown.pk not in told


def test_it_names_a_chat_it_cannot_find_without_a_link(alice):
    session = chat.start_chat(alice)
    fact = remember(alice, session, origin_session_id="imported:legacy-id")
    told = provenance_of([fact])[fact.pk]
    assert told.text.startswith("from a chat, ") and told.url == ""


def test_it_shows_provenance_on_the_facts_page(alice, alice_client):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Breakfast talk")
    turn = recording.record(alice, str(session.pk), EventType.TOOL_CALL, {"name": "remember_fact"})
    remember(alice, session, origin_event_id=turn.pk)
    content = alice_client.get(reverse("fact-list")).content.decode()
    assert "from “Breakfast talk”, " in content
    assert f'href="{reverse("event-source", args=[turn.pk])}"' in content


def test_it_shows_where_facts_came_from_in_status(alice):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Breakfast talk")
    session.refresh_from_db()
    turn = recording.record(alice, str(session.pk), EventType.TOOL_CALL, {"name": "remember_fact"})
    remember(alice, session, origin_event_id=turn.pk)
    lines = fact_lines(session)
    assert lines[0].strip() == "**Facts changed last (where each came from):**"
    assert lines[1].startswith("- pref/drink: tea — [from “Breakfast talk”, ")
    assert lines[1].endswith(f"]({reverse('event-source', args=[turn.pk])})")


def test_it_takes_a_link_to_the_turn_in_its_chat(alice, alice_client):
    session = chat.start_chat(alice)
    start = timezone.now() - timedelta(hours=1)
    events = [
        recording.record(alice, str(session.pk), EventType.USER_MESSAGE, {"content": f"m{n}"})
        for n in range(EVENTS_PER_PAGE + 2)
    ]
    for number, event in enumerate(events):
        Event.objects.filter(pk=event.pk).update(created_at=start + timedelta(seconds=number))
    first, last = events[0], events[-1]
    detail = reverse("session-detail", args=[session.pk])
    response = alice_client.get(reverse("event-source", args=[first.pk]))
    assert response["Location"] == f"{detail}?page=1#event-{first.pk}"
    response = alice_client.get(reverse("event-source", args=[last.pk]))
    assert response["Location"] == f"{detail}?page=2#event-{last.pk}"
    assert f'id="event-{last.pk}"' in alice_client.get(response["Location"]).content.decode()


def test_it_answers_404_for_another_users_event_or_a_chat_that_is_not_one(
    alice, bob_client, alice_client
):
    session = chat.start_chat(alice)
    event = recording.record(alice, str(session.pk), EventType.USER_MESSAGE, {"content": "mine"})
    assert bob_client.get(reverse("event-source", args=[event.pk])).status_code == 404
    legacy = recording.record(alice, "imported-legacy", EventType.USER_MESSAGE, {"content": "x"})
    assert alice_client.get(reverse("event-source", args=[legacy.pk])).status_code == 404
    assert alice_client.get("/events/999999/").status_code == 404


# The backfill of rows stored before provenance was kept ------------------------


@pytest.fixture
def migrating_db(transactional_db):
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ensure_index()  # `migrate` does this after rebuilding tables; the executor does not


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_it_links_what_stored_rows_still_tell_when_it_migrates(migrating_db):
    old = migrate([("memory", "0011_event_search_keys")])
    owner = old.get_model("auth", "User").objects.create(username="carol")
    Event, Fact = old.get_model("memory", "Event"), old.get_model("memory", "Fact")

    def event(kind, **fields):
        return Event.objects.create(owner=owner, session_id="s1", event_type=kind, **fields)

    said = event("user_message", text="I moved to Porto", consolidated_at=timezone.now())
    answered = event("assistant_response", text="Nice!", consolidated_at=timezone.now())
    later = event("user_message", text="not consolidated yet")
    facts = [{"category": "place", "key": "home_city", "value": "Porto"}]
    summary = event(
        "summary",
        text="Moved to Porto.",
        data={"first_event_id": said.pk, "last_event_id": answered.pk, "facts": facts},
    )
    arguments = json.dumps({"category": "Pref", "key": "Drink", "value": "tea"})
    call = event("tool_call", tool_name="remember_fact", data={"arguments": arguments})
    stale = json.dumps({"category": "pref", "key": "food", "value": "rice"})
    event("tool_call", tool_name="remember_fact", data={"arguments": stale})
    for category, key, value in [
        ("place", "home_city", "Porto"),
        ("pref", "drink", "tea"),
        ("pref", "food", "noodles"),  # changed on the page since: not the call's value
    ]:
        Fact.objects.create(owner=owner, category=category, key=key, value=value)

    new = migrate([("memory", "0012_provenance")])
    Event, Fact = new.get_model("memory", "Event"), new.get_model("memory", "Fact")
    condensed = Event.objects.get(pk=summary.pk).condensed.values_list("pk", flat=True)
    assert sorted(condensed) == [said.pk, answered.pk]
    assert later.pk not in condensed
    told = {f.key: (f.origin, f.origin_event_id, f.origin_session_id) for f in Fact.objects.all()}
    assert told == {
        "home_city": ("consolidation", summary.pk, "s1"),
        "drink": ("turn", call.pk, "s1"),
        "food": ("", None, ""),
    }


def test_it_lists_facts_with_their_provenance_in_the_api(alice, bob):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Breakfast talk")
    turn = recording.record(alice, str(session.pk), EventType.TOOL_CALL, {"name": "remember_fact"})
    remember(alice, session, origin_event_id=turn.pk)
    Fact.objects.create(owner=bob, category="pref", key="drink", value="bob's milk")
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(alice, 'script')[1]}"})

    answer = api.get(reverse("api-facts")).json()

    assert answer["count"] == 1  # bob's fact is not alice's
    fact = answer["facts"][0]
    assert (fact["key"], fact["value"], fact["origin_event_id"]) == ("drink", "tea", turn.pk)
    assert fact["provenance"]["text"].startswith("from “Breakfast talk”, ")
    assert fact["provenance"]["url"] == reverse("event-source", args=[turn.pk])
    assert api.get(reverse("api-facts") + "?page=9").status_code == 400
