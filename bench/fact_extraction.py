"""How many of the personal facts stated in one message an embedded model stores.

Serves the model (as bench/local_model.py does) and runs the agent's real turn
(agent.runtime.run_turn: the app's prompt, tools, calls written as text, rounds)
for messages that each state four facts — a name, a city, a partner, an
allergy — in phrasings of their own, each for a new user (no facts, no memory).
After the turn it counts which of the four the user's facts hold (a fact holds
one when its key or value names it). Prints, per phrasing, the counts of each
run, then the total.

The embedded model decodes greedily, so the runs of one phrasing differ only by
what changes between turns (the time in the prompt, the session's id).

    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/fact_extraction.py
    .venv/bin/python bench/fact_extraction.py --model smollm2 --runs 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.local_model import setup_django  # noqa: E402

# Each message states four facts: (message, {fact: words any of which names it}).
MESSAGES: list[tuple[str, dict[str, tuple[str, ...]]]] = [
    (
        "Hi! I'm Marta, I live in Porto with my husband João, and I'm allergic to peanuts.",
        {
            "name": ("marta",),
            "city": ("porto",),
            "partner": ("joão", "joao"),
            "allergy": ("peanut",),
        },
    ),
    (
        "A bit about me: my name is Tom Becker. Home is Leeds. My partner is called Priya. "
        "I can't eat shellfish, I'm allergic.",
        {"name": ("tom",), "city": ("leeds",), "partner": ("priya",), "allergy": ("shellfish",)},
    ),
    (
        "Quick intro: name's Aiko, based in Osaka, married to Kenji, allergic to penicillin.",
        {"name": ("aiko",), "city": ("osaka",), "partner": ("kenji",), "allergy": ("penicillin",)},
    ),
    (
        "I am Lucas and I live in Lyon. My girlfriend's name is Chloé. Please note that I "
        "have a severe allergy to sesame.",
        {"name": ("lucas",), "city": ("lyon",), "partner": ("chlo",), "allergy": ("sesame",)},
    ),
    (
        "Hello, this is Nadia from Cairo. My wife Layla and I just got a cat, which is "
        "awkward because I'm allergic to cats.",
        {"name": ("nadia",), "city": ("cairo",), "partner": ("layla",), "allergy": ("cat",)},
    ),
]


def model_file(name: str) -> Path:
    from agent.local_model import bundled_model_path, fetched_model_path
    from agent.model_files import BUNDLED_MODEL

    if name == BUNDLED_MODEL:
        return bundled_model_path()
    models = os.environ.get("NEOTASK_TEST_MODELS_DIR")
    return Path(models) / f"{name}.gguf" if models else fetched_model_path(name)


def embedded_endpoint(name: str, max_tokens: int) -> tuple[Any, Any]:
    """The embedded model `name` served as the app serves it, and its Endpoint."""
    from django.conf import settings

    from agent.llm import LOCAL_MODEL_LABEL, Endpoint
    from agent.local_model import start_server

    key = secrets.token_urlsafe(24)
    window = settings.NEOTASK["llm"]["context_window"]
    server = start_server(model_file(name), 0, key, window)
    endpoint = Endpoint(
        base_url=f"{server.listening_address}/v1",
        api_key=key,
        model="local",
        context_window=window,
        timeout=600,
        label=LOCAL_MODEL_LABEL,
        max_answer_tokens=max_tokens,
    )
    return server, endpoint


def stored(owner: Any, expected: dict[str, tuple[str, ...]]) -> tuple[int, list[str]]:
    """How many of the expected facts the owner's facts hold, and the facts."""
    from memory.models import Fact

    facts = [f"{f.category}/{f.key}: {f.value}" for f in Fact.objects.filter(owner=owner)]
    text = " ".join(facts).lower()
    held = sum(any(word in text for word in words) for words in expected.values())
    return held, facts


async def one_turn(endpoint: Any, owner: Any, message: str) -> tuple[str, float, str]:
    from agent.llm import LLMClient
    from agent.runtime import TurnRequest, run_turn

    async def emit(frame: Any) -> None:
        pass

    request = TurnRequest(owner=owner, session_id=str(uuid.uuid4()), endpoint=endpoint)
    started = time.perf_counter()
    result = await run_turn(request, message, emit, LLMClient(endpoint))
    return result.status, time.perf_counter() - started, request.session_id


def said(owner: Any, session_id: str) -> list[str]:
    """What the turn wrote: its answers and tool calls."""
    from memory.models import Event, EventType

    events = Event.objects.filter(owner=owner, session_id=session_id).exclude(
        event_type__in=[EventType.USER_MESSAGE, EventType.RECALL]
    )
    return [f"{e.event_type}: {e.text or e.data}"[:300] for e in events.order_by("id")]


def main() -> None:
    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from agent.model_files import LOCAL_MODEL_NAMES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", choices=LOCAL_MODEL_NAMES, default=settings.NEOTASK["llm"]["local_model"]
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each message")
    parser.add_argument("--messages", type=int, default=len(MESSAGES), help="how many messages")
    parser.add_argument("--max-tokens", type=int, default=800, help="max_tokens of each answer")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of the model a turn may run ([llm] max_iterations); 1: the first's calls",
    )
    parser.add_argument("--verbose", action="store_true", help="print the facts stored")
    options = parser.parse_args()

    settings.NEOTASK["llm"]["max_iterations"] = options.rounds
    call_command("migrate", verbosity=0)
    server, endpoint = embedded_endpoint(options.model, options.max_tokens)
    users = get_user_model().objects
    totals: list[int] = []
    for number, (message, expected) in enumerate(MESSAGES[: options.messages], 1):
        counts = []
        for run in range(options.runs):
            owner = users.create_user(f"bench-{number}-{run}-{secrets.token_hex(3)}")
            status, seconds, session_id = asyncio.run(one_turn(endpoint, owner, message))
            held, facts = stored(owner, expected)
            counts.append(held)
            if options.verbose:
                print(
                    f"  message {number} run {run + 1}: {held}/4 {status} {seconds:.0f} s {facts}"
                )
                for line in said(owner, session_id):
                    print(f"    {line}")
        totals += counts
        print(f"{options.model} message {number}: {' '.join(map(str, counts))} of 4", flush=True)
    mean = statistics.mean(totals)
    full = sum(count == 4 for count in totals)
    print(
        f"{options.model}: {sum(totals)} of {4 * len(totals)} facts stored "
        f"(mean {mean:.2f} of 4 per message; all four in {full} of {len(totals)} turns)"
    )
    del server


if __name__ == "__main__":
    main()
