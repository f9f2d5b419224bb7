"""Isolation of memory: search, every branch of get_context, auto-recall, the prompt,
the agent's tools and consolidation never bring alice's memories to bob, even when
hers are the best match (real embeddings; alice's content is pinned and important)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from agent import approvals, macros
from agent.consolidation_job import run as consolidate
from agent.frames import Frame
from agent.prompt import build_messages
from agent.tools import ToolContext, ToolError, get_tool, parse_arguments
from memory import recording
from memory.embeddings import embed_text
from memory.files.search import FileHit
from memory.models import Event, Fact
from memory.recall import recall
from memory.retrieval import get_context
from memory.search import BRANCHES, search_memory
from memory.workspace import workspace_dir
from sessions_app import chat
from sessions_app.meter import status
from sessions_app.models import Session
from tests.support.chat_turns import converse
from tests.support.consolidation import answer, chat_yesterday
from tests.support.scripted_llm import Reply
from tests.support.world import (
    MEMORY_MD,
    SISTER,
    VAULT,
    build_bob,
    leaks,
    secret,
    snapshot,
)

# Bob's questions, and alice's very words: her memories are the best match for each.
QUESTIONS = [
    "What is the vault code of the lake house?",
    "Where is the spare key hidden?",
    "Where does my sister live?",
    "When is the flight to Osaka?",
    VAULT,
    SISTER,
    MEMORY_MD,
]


@pytest.fixture
def bobs_session(bob) -> Session:
    return build_bob(bob)


@pytest.fixture
def everything_recalled(configure):
    """Similarity and recall as wide open as they go: any of alice's rows that slipped
    through the owner scope would show. (Relevance keeps its bar: alice's pinned message
    and summary are above it, and it must leave bob's other events to similarity.)"""
    configure(
        "memory",
        similarity_threshold=-1.0,
        similarity_limit=50,
        recall_min_score=-1.0,
        recall_limit=50,
    )


def owners(hits: list[Any]) -> set[int]:
    return {hit.event.owner_id for hit in hits if not isinstance(hit, FileHit)}


@pytest.mark.parametrize("branch", BRANCHES)
def test_it_searches_only_bobs_memory(alices_world, bob, bobs_session, branch):
    for question in QUESTIONS:
        hits = search_memory(bob, question, k=50, branch=branch)
        assert owners(hits) <= {bob.pk}, (branch, question)
        assert not leaks(" ".join(str(vars(hit)) for hit in hits), alices_world), (branch, question)
    # Alice's own search finds what bob's could not.
    hits = search_memory(alices_world.user, QUESTIONS[0], k=5, branch=branch)
    assert owners(hits) == {alices_world.user.pk}


def test_it_searches_only_bobs_memory_files(alices_world, bob, bobs_session):
    for question in QUESTIONS:
        files = [hit for hit in search_memory(bob, question, k=50) if isinstance(hit, FileHit)]
        assert {hit.path for hit in files} <= {"memory/bob.md"}, question
    mine = search_memory(alices_world.user, "Where is the spare key hidden?", k=3)
    assert any(isinstance(hit, FileHit) and hit.path == "MEMORY.md" for hit in mine)


@pytest.mark.usefixtures("everything_recalled")
@pytest.mark.parametrize("question", QUESTIONS)
def test_it_builds_bobs_context_from_bobs_events_only(alices_world, bob, bobs_session, question):
    context = get_context(bob, str(bobs_session.pk), question)
    for branch in ("recency", "relevance", "similarity"):
        assert context.branch(branch), f"bob's own {branch} branch is empty"
    assert {item.event.owner_id for item in context.items} == {bob.pk}
    assert not leaks(" ".join(item.event.text for item in context.items), alices_world)


@pytest.mark.usefixtures("everything_recalled")
def test_it_gives_bob_nothing_for_alices_session_ids(alices_world, bob, bobs_session):
    # Alice's chat is in working memory; bob naming its id gets none of it.
    assert get_context(alices_world.user, str(alices_world.chat.pk), VAULT).recent
    for session in (alices_world.chat, alices_world.archived, alices_world.cron):
        context = get_context(bob, str(session.pk), VAULT)
        assert context.recent == [] and context.summary is None
        assert context.session_recall == []
        assert {item.event.owner_id for item in context.items} <= {bob.pk}


def test_it_keeps_working_memory_apart_for_owners_of_the_same_session_id(alice, bob):
    """Imported or legacy session ids are free text: two owners can share one. The
    cached window of one must not answer for the other, even when the event counts
    happen to line up."""
    recording.record(bob, "imported-1", "user_message", {"content": "bob's first"})
    recording.record(alice, "imported-1", "user_message", {"content": secret("shared-id")})
    assert [e.text for e in get_context(alice, "imported-1", "").recent] == [secret("shared-id")]
    recording.record(bob, "imported-1", "user_message", {"content": "bob's second"})
    recent = get_context(bob, "imported-1", "").recent
    assert [e.text for e in recent] == ["bob's first", "bob's second"]
    assert [e.text for e in get_context(alice, "imported-1", "").recent] == [secret("shared-id")]


@pytest.mark.usefixtures("everything_recalled")
@pytest.mark.parametrize("question", QUESTIONS)
def test_it_auto_recalls_only_bobs_memories(alices_world, bob, bobs_session, question):
    items = recall(bob, "main", "a-new-session", question, embed_text(question))
    assert items, "bob's own memories are recalled"
    assert not leaks(json.dumps(items), alices_world)
    assert all("MEMORY.md" not in item["source"] for item in items)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("everything_recalled")
def test_it_sends_the_model_nothing_of_alices_in_bobs_turn(alices_world, bob, bobs_session, llm):
    """The whole prompt: system prompt, facts, MEMORY.md through recall, recalled
    memories and history, in a fresh session (auto-recall) and the next turn."""
    fresh = chat.start_chat(bob)
    frames: list[dict[str, Any]] = []

    async def emit(frame: Frame) -> None:
        frames.append(frame.as_json())

    llm.script(Reply(text="No idea."), Reply(text="Still no idea."))
    async_to_sync(converse)(fresh, QUESTIONS[0], emit)
    async_to_sync(converse)(fresh, QUESTIONS[1], emit)
    assert len(llm.requests) == 2
    for request in llm.requests:
        prompt = json.dumps(request["messages"])
        assert "Tea." in prompt or "gym" in prompt  # bob's own memory is there
        assert not leaks(prompt, alices_world)
    assert not leaks(json.dumps(frames), alices_world)
    assert not leaks(async_to_sync(status)(fresh), alices_world)
    assert Event.objects.filter(owner=bob, session_id=str(fresh.pk), event_type="recall").exists()


@pytest.mark.usefixtures("everything_recalled")
def test_it_builds_bobs_prompt_without_alices_facts_or_persona(alices_world, bob, bobs_session):
    messages = build_messages(bob, str(bobs_session.pk), "", query=VAULT)
    prompt = json.dumps(messages)
    assert "sport/gym: open late" in prompt
    assert not leaks(prompt, alices_world)


# The agent's tools, run for bob ------------------------------------------------


def use(bob: User, name: str, **arguments: Any) -> str:
    tool = get_tool(name)
    workspace = workspace_dir(bob.pk, "main")
    context = ToolContext(owner=bob, session_id="bob-tools", agent_name="main", workspace=workspace)
    return tool.run(context, parse_arguments(tool, json.dumps(arguments)))


def test_it_keeps_alices_facts_from_bobs_fact_tools(alices_world, bob, bobs_session):
    before = snapshot(alices_world.user)
    with pytest.raises(ToolError, match="There is no fact"):
        use(bob, "forget_fact", category=alices_world.fact.category, key=alices_world.fact.key)
    # Same category and key: bob's own fact, alice's stays as it was.
    use(
        bob,
        "remember_fact",
        category=alices_world.fact.category,
        key=alices_world.fact.key,
        value="bob's",
    )
    assert Fact.objects.get(owner=bob, key=alices_world.fact.key).value == "bob's"
    assert snapshot(alices_world.user) == before


def test_it_keeps_alices_memory_from_bobs_search_tool(alices_world, bob, bobs_session):
    for question in QUESTIONS:
        assert not leaks(use(bob, "search_memory", query=question), alices_world), question


def test_it_keeps_alices_files_from_bobs_file_tools(alices_world, bob, bobs_session):
    before = snapshot(alices_world.user)
    paths = [
        "MEMORY.md",
        f"memory/{secret('notes')}.md",
        f"../../{alices_world.user.pk}/main/MEMORY.md",
        str(alices_world.workspace / "MEMORY.md"),
    ]
    for path in paths:
        for name, extra in [
            ("read_memory_file", {}),
            ("append_memory_file", {"text": "bob was here"}),
            ("write_memory_file", {"text": "bob was here"}),
        ]:
            try:
                output = use(bob, name, path=path, **extra)
            except ToolError as exc:
                output = str(exc)
            assert not leaks(output, alices_world, asked=path), (name, path)
    # Lists the files bob just wrote under alice's names in his own workspace.
    assert not leaks(use(bob, "list_memory_files"), alices_world, asked=" ".join(paths))
    assert snapshot(alices_world.user) == before
    # What bob wrote to "MEMORY.md" went to his own workspace.
    assert (workspace_dir(bob.pk, "main") / "MEMORY.md").read_text() == "bob was here"


def test_it_keeps_alices_approvals_and_prefixes_from_bob(alices_world, bob):
    before = snapshot(alices_world.user)
    bob = User.objects.get(pk=bob.pk)
    bob.is_superuser = True  # every permission: only ownership stands in the way
    for decision in ("once", "always", "deny"):
        with pytest.raises(approvals.ApprovalError, match="no such approval request"):
            approvals.decide(bob, alices_world.approval.pk, decision)
    # Alice's "Allow always" does not let bob's commands run unasked.
    assert approvals.is_allowed(alices_world.user, f"{alices_world.prefix.prefix} more")
    assert not approvals.is_allowed(bob, f"{alices_world.prefix.prefix} more")
    assert snapshot(alices_world.user) == before


def test_it_gives_bob_no_hints_from_alices_macros(alices_world, bob, configure):
    configure("macros", hint_confidence=0.0, min_uses=0)
    assert macros.hint(alices_world.user, alices_world.macro.trigger_tool, {}) is not None
    assert macros.hint(bob, alices_world.macro.trigger_tool, {}) is None


# Consolidation -------------------------------------------------------------------


def test_it_consolidates_each_users_conversation_apart(alice, bob, llm):
    chat_yesterday(alice, "same-id", (f"My PIN is 4417 {secret('pin')}", "Noted."))
    chat_yesterday(bob, "same-id", ("I moved to Porto", "Nice!"))
    llm.script(answer("Bob moved to Porto.", ("place", "home_city", "Porto")))
    report = consolidate(owner_id=bob.pk)  # `consolidate --user bob`
    assert report.sessions == 1
    [request] = llm.requests
    assert "Porto" in json.dumps(request) and secret("pin") not in json.dumps(request)
    assert Fact.objects.get(key="home_city").owner == bob
    assert not Event.objects.filter(owner=alice, consolidated_at__isnull=False).exists()
    summary = Event.objects.get(event_type="summary")
    assert summary.owner == bob and "PIN" not in summary.text

    llm.script(answer(f"Alice has a PIN. {secret('pin-summary')}", ("pin", "code", "4417")))
    consolidate()  # everyone: one request per owner's session, each told only its own
    assert secret("pin") in json.dumps(llm.requests[1]) and "Porto" not in json.dumps(
        llm.requests[1]
    )
    assert Fact.objects.get(key="code").owner == alice
    assert Event.objects.get(event_type="summary", owner=alice).session_id == "same-id"
