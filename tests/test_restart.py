"""Stop the app mid-conversation and start it again: nothing is forgotten."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import pytest
import websockets

from tests.processes import ROOT, app_env, free_port, start_daphne
from tests.scripted_llm import Reply

SETUP = """
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from sessions_app.chat import start_chat
user = get_user_model().objects.create_user("restart")
store = SessionStore()
store[SESSION_KEY] = str(user.pk)
store["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
store["_auth_user_hash"] = user.get_session_auth_hash()
store.create()
print(store.session_key, start_chat(user).key)
"""


async def say(port: int, cookie: str, key: str, text: str) -> list[dict]:
    frames = []
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/chat/{key}/",
        additional_headers={"Cookie": f"sessionid={cookie}", "Origin": "http://127.0.0.1"},
    ) as socket:
        await socket.send(json.dumps({"type": "message", "text": text}))
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
            frames.append(frame)
            if frame["type"] == "done":
                return frames


@pytest.mark.django_db(transaction=True)
def test_it_remembers_the_conversation_across_a_restart(llm, tmp_path):
    env = app_env(tmp_path, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    cookie, key = (
        subprocess.run(
            [*manage, "shell", "-c", SETUP],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.splitlines()[-1]
        .split()
    )
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
