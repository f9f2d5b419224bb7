"""Does an embedded model recall a fact told ~450 tokens earlier in the same chat,
and does it call a tool when asked to remember something?

Serves the model (as bench/local_model.py does), sends a conversation that states
a fact, then talks of other things (scripted replies: only the final answer is
generated) and asks for the fact; prints each answer and whether it holds it.
Then offers the agent's tools and asks it to remember a fact: prints the call
as the turn would run it (a tagged call, or one written as text and accepted
by agent.text_tool_calls), or that there was none.

    NEOTASK_DATA_DIR=data .venv/bin/python bench/recall_probe.py --model qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.local_model import setup_django  # noqa: E402

OTHER_TALK = [
    (
        "I'm planning a weekend trip to the coast. What should I pack for changeable weather?",
        "Pack layers: a waterproof jacket, a warm fleece, a couple of T-shirts, comfortable "
        "walking shoes that can get wet, a hat, sunglasses and sunscreen. A small daypack "
        "helps on walks, and a dry bag keeps a phone and papers safe near the water.",
    ),
    (
        "Good idea. Can you suggest a simple dinner I could cook in a holiday rental?",
        "A one-pan pasta works well: boil pasta with cherry tomatoes, garlic, spinach and "
        "olive oil in the same pan, then finish with lemon zest and grated cheese. It needs "
        "one pot, little washing up and ingredients any small shop sells.",
    ),
    (
        "What's a good way to keep a small herb garden alive on a windowsill?",
        "Give the herbs at least five hours of light, water when the top of the soil is dry, "
        "use pots with drainage holes and pinch off flower buds so the plants keep growing "
        "leaves. Basil likes warmth; rosemary and thyme prefer drier soil.",
    ),
    (
        "And how often should I rest when training for a ten kilometre run?",
        "Most plans use three or four runs a week with a rest day after each hard session. "
        "Keep most runs easy, add one longer run and one faster session, and increase the "
        "weekly distance by about ten percent at most. Sleep matters as much as training.",
    ),
    (
        "Any tips for reading more books this year?",
        "Keep a book with you, read a few pages at fixed moments such as after breakfast or "
        "before bed, drop books you do not enjoy, mix short and long ones, and keep a simple "
        "list of what you finished. Audiobooks count too, on walks or in the car.",
    ),
    (
        "How do I clean a cast iron pan without ruining it?",
        "Rinse it with hot water while it is still warm and scrub with a brush or coarse salt. "
        "Avoid soaking it. Dry it completely on the stove, then rub in a thin layer of oil "
        "and heat it for a minute so the seasoning stays smooth and rust cannot start.",
    ),
]

PROBES = [
    ("By the way, my phone is a Pixel.", "What phone do I have?", "pixel"),
    ("By the way, my favourite colour is teal.", "What is my favourite colour?", "teal"),
]


def conversation(fact: str, question: str) -> list[dict[str, str]]:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": fact},
        {"role": "assistant", "content": "Noted, thanks for telling me."},
    ]
    for asked, answered in OTHER_TALK:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    return [*messages, {"role": "user", "content": question}]


def tool_call(client: Any, url: str) -> str:
    from agent.text_tool_calls import tool_call_in_text
    from agent.tools import available_tools

    tools = available_tools()
    messages = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "Remember this fact about me: my dog is called Rex."},
    ]
    body = {
        "messages": messages,
        "tools": [tool.schema() for tool in tools],
        "max_tokens": 120,
        "temperature": 0,
    }
    message = client.post(f"{url}/v1/chat/completions", json=body).json()["choices"][0]["message"]
    for call in message.get("tool_calls") or []:
        function = call["function"]
        return f"tagged: {function['name']} {function['arguments']}"
    written = tool_call_in_text(message.get("content") or "", tools, "probe")
    if written is not None:
        return f"written as text, accepted: {written.name} {written.arguments}"
    return f"none — {message.get('content')!r}"


def main() -> None:
    setup_django()
    import httpx

    from agent.local_model import bundled_model_path, fetched_model_path, start_server
    from agent.model_files import BUNDLED_MODEL, LOCAL_MODEL_NAMES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=LOCAL_MODEL_NAMES, required=True)
    options = parser.parse_args()
    name = options.model
    path = bundled_model_path() if name == BUNDLED_MODEL else fetched_model_path(name)
    key = secrets.token_urlsafe(24)
    server = start_server(path, 0, key, 4096)
    url = server.listening_address
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=headers, timeout=300) as client:
        for fact, question, expected in PROBES:
            messages = conversation(fact, question)
            tokens = client.post(
                f"{url}/tokenize", json={"content": " ".join(m["content"] for m in messages)}
            ).json()["tokens"]
            body = {"messages": messages, "max_tokens": 40, "temperature": 0}
            reply = client.post(f"{url}/v1/chat/completions", json=body).json()
            answer = reply["choices"][0]["message"]["content"].strip().replace("\n", " ")
            held = "yes" if expected in answer.lower() else "NO"
            print(f"{name}: {len(tokens)} tokens, recalled {expected!r}: {held} — {answer!r}")
        print(f"{name}: tool call — {tool_call(client, url)}")
    del server


if __name__ == "__main__":
    main()
