"""Does an embedded model, with the user's facts and an earlier message in its
memory, answer a request as itself, to "you" — or speak as the user, or repeat
the memory back?

For each request, a new user with four facts (name, city, partner, allergy) and
an earlier chat stating them asks in a new chat; the agent's real turn answers
(agent.runtime.run_turn: the app's prompt and memory). Prints each answer and
whether it speaks as the user (says "I'm allergic", "I live in", "my husband" …
of the user's facts), then the count.

    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/answer_voice.py
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fact_extraction import embedded_endpoint, setup_django  # noqa: E402

EARLIER = "Hi! I'm Marta, I live in Porto with my husband João, and I'm allergic to peanuts."
FACTS = [
    ("person", "name", "Marta"),
    ("place", "city", "Porto"),
    ("person", "husband", "João"),
    ("health", "allergy", "peanuts"),
]
REQUESTS = [
    "Suggest a dinner I could cook tonight. Anything I should avoid?",
    "What could we do this weekend?",
    "Write a short note to invite two friends for lunch on Sunday.",
    "Which snacks should I pack for a long train ride?",
    "Give me three ideas for a birthday present for my husband.",
]
# The user's facts said in the first person: the answer speaks as the user.
AS_THE_USER = re.compile(
    r"\bI(?:'m| am) (?:allergic|Marta)|\bI live\b|\bmy (?:husband|name is)|\bI have an? allergy",
    re.IGNORECASE,
)


def prepare(owner: Any) -> None:
    from core.history import Actor
    from memory import recording
    from memory.models import Fact
    from memory.tasks import embed_missing

    for category, key, value in FACTS:
        Fact.objects.remember(
            owner, category, key, value, actor=Actor.user(owner), source="user", origin="message"
        )
    recording.record(owner, "earlier", "user_message", {"content": EARLIER})
    embed_missing()


def main() -> None:
    setup_django()
    import argparse

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from agent.llm import LLMClient
    from agent.model_files import LOCAL_MODEL_NAMES
    from agent.runtime import TurnRequest, run_turn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", choices=LOCAL_MODEL_NAMES, default=settings.NEOTASK["llm"]["local_model"]
    )
    parser.add_argument("--max-tokens", type=int, default=200)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    server, endpoint = embedded_endpoint(options.model, options.max_tokens)

    async def emit(frame: Any) -> None:
        pass

    as_user = 0
    for number, request in enumerate(REQUESTS, 1):
        owner = get_user_model().objects.create_user(f"voice-{number}-{secrets.token_hex(3)}")
        prepare(owner)
        turn = TurnRequest(owner=owner, session_id=str(uuid.uuid4()), endpoint=endpoint)
        result = asyncio.run(run_turn(turn, request, emit, LLMClient(endpoint)))
        answer = " ".join(result.answer.split())
        speaks = bool(AS_THE_USER.search(answer))
        as_user += speaks
        print(f"{number}. {request}\n   {'AS THE USER' if speaks else 'ok'}: {answer[:400]!r}")
    print(f"{options.model}: {as_user} of {len(REQUESTS)} answers speak as the user")
    del server


if __name__ == "__main__":
    main()
