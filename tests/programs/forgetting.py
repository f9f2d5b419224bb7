"""Forgetting across processes: one process seeds and deletes, another keeps its
in-process state (vector index, working memory) and answers questions on
stdin, one JSON line each, until stdin closes."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from memory import recording
from memory.embeddings import embed_text
from memory.models import EventType
from memory.recall import recall
from memory.retrieval import get_context
from memory.search import search_memory
from memory.tasks import embed_missing
from memory.vector_index import index_for
from sessions_app.chat import start_chat
from sessions_app.chat_deletion import delete_message
from sessions_app.models import ApiToken

SECRET = "My locker combination at the climbing gym is 4417."
OTHERS = [
    "I water the balcony tomatoes every second evening.",
    "The dentist moved my appointment to Thursday morning.",
    "Our team standup starts at half past nine.",
]


def seed(username: str) -> dict[str, Any]:
    """A user whose old chat holds the secret among other messages, embedded by the
    real model; a second chat to ask from; an API token."""
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user(username)
    old = start_chat(owner)
    ids = {}
    for text in [OTHERS[0], SECRET, *OTHERS[1:]]:
        event = recording.record(owner, str(old.pk), EventType.USER_MESSAGE, {"content": text})
        ids[text] = event.pk
    embed_missing()
    asking = start_chat(owner)
    _, token = ApiToken.issue(owner, "forgetting test")
    return {
        "secret_id": ids[SECRET],
        "old_session": str(old.pk),
        "asking_session": str(asking.pk),
        "token": token,
    }


def forget(username: str, event_id: int) -> dict[str, Any]:
    owner = get_user_model().objects.get(username=username)
    return delete_message(owner, event_id).as_dict()


def answer(question: dict[str, Any]) -> dict[str, Any]:
    """Whether this process's event index holds `event_id` after a sync, and what
    memory search, get_context, auto-recall and the API return for `query`."""
    owner = get_user_model().objects.get(username=question["username"])
    query = question["query"]
    vector = embed_text(query)
    # Asked first: whether a sync alone (no query meeting the vector as a hit) drops
    # it from an in-process index (in PostgreSQL it goes with its row).
    event_id = question["event_id"]
    indexed = event_id in index_for(owner.pk).query(vector).scores([event_id])
    found: dict[str, list[list[Any]]] = {}
    for branch in ("fused", "vector", "lexical"):
        hits = search_memory(owner, query, k=10, branch=branch, query_vector=vector)
        found[branch] = [[hit.event.pk, hit.event.text] for hit in hits if hasattr(hit, "event")]
    context = get_context(owner, question["asking_session"], query, query_vector=vector)
    found["context"] = [[item.event.pk, item.event.text] for item in context.items]
    recalled = recall(owner, "main", question["asking_session"], query, vector)
    found["recall"] = [[item.get("event_id"), item["text"]] for item in recalled]
    response = Client(HTTP_HOST="127.0.0.1").get(
        f"/api/v1/sessions/{question['old_session']}/",
        HTTP_AUTHORIZATION=f"Bearer {question['token']}",
    )
    events = response.json()["events"]
    found["api"] = [[event["id"], event["text"]] for event in events]
    return {"found": found, "indexed": indexed}


def serve() -> None:
    """Answer each question on stdin (a JSON line) with a JSON line, in this one
    process, so that its indexes live from one question to the next."""
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)
