"""Stop the app mid-conversation and start it again: nothing is forgotten."""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.support.processes import app_env, free_port, logged_in_chat, say, start_daphne
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.slow


@pytest.mark.django_db(transaction=True)
def test_it_remembers_the_conversation_across_a_restart(llm, tmp_path):
    env = app_env(tmp_path, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
    cookie, key = logged_in_chat(env, "restart", migrate=True)
    port = free_port()
    server = start_daphne(env, port)
    llm.script(Reply(text="Nice to meet you, Ada."))
    asyncio.run(say(port, cookie, key, "My name is Ada."))
    server.send_signal(signal.SIGKILL)  # no goodbye: a crash, not a clean stop
    server.wait()

    server = start_daphne(env, port)
    try:
        llm.script(Reply(text="You are Ada."))
        frames = asyncio.run(say(port, cookie, key, "What is my name?"))
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert frames[-1]["status"] == "completed"
    history = llm.requests[-1]["messages"][1:]
    assert history == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
