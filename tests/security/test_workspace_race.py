"""The symlink race: bob's sandboxed command swaps his memory files and folders with
links to alice's files and to the server's secret while the server reads, saves,
deletes, lists and indexes them for bob through every entry point.

The server opens workspace paths from a descriptor of the workspace, component by
component, without following links (memory/files/workspace_fs.py), so no attempt
may cross: no response holds alice's text or the secret, nothing of alice's changes,
and no entry point answers 500.
"""

from __future__ import annotations

import itertools
import re
import shutil
import threading
from pathlib import Path

import pytest
from django.conf import settings

from agent.tools import ToolContext, ToolError, get_tool
from memory.files.indexing import index_path, index_workspace
from memory.files.paths import MemoryPathError
from memory.models import MemoryChunk
from memory.workspace import workspace_dir
from tests.support.files import file_hashes
from tests.support.processes import PROGRAMS
from tests.support.records import allow_terminal
from tests.support.tools import run_terminal
from tests.support.web import client_for
from tests.support.world import secret as marker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ATTEMPTS = 10_000
SERVER_SECRET = "server-secret-key-9e41"


@pytest.fixture
def race(world, bob, configure):
    """Bob's workspace with the files the swapper races on, the swapper running in
    his sandbox, and what must stay out of his reach."""
    configure("terminal", enabled=True, timeout_seconds=600, cpu_seconds=600)
    allow_terminal(bob)
    secret = Path(settings.DATA_DIR) / "secret_key"
    secret.write_text(SERVER_SECRET)
    alice_memory = world.workspace / "memory"
    alice_file = next(alice_memory.glob("*.md"))
    assert ALICE_TEXT in alice_file.read_text()
    # Bob's own files under the names alice's have, so that a followed link lands on hers.
    workspace = workspace_dir(bob.pk, "main")
    (workspace / "memory" / "sub").mkdir(parents=True)
    (workspace / "memory" / "race.md").write_text("bob's note\n")
    (workspace / "memory" / "swapped.md").write_text("bob's swapped note\n")
    (workspace / "memory" / "sub" / alice_file.name).write_text("bob's sub note\n")
    shutil.copy(PROGRAMS / "swapper.py", workspace / "swapper.py")
    before = {"alice": file_hashes(world.workspace), "secret": secret.read_text()}
    context = ToolContext(bob, "s1", "main", workspace)
    output: list[str] = []

    def swap() -> None:
        command = f"python3 swapper.py {alice_file} {alice_memory} {secret}"
        output.append(run_terminal(context, command))

    swapper = threading.Thread(target=swap)
    swapper.start()
    # The sandbox makes its links first. On a busy machine that has taken over a
    # minute, so wait for the swapper itself (the terminal's 600 s bounds it), not a clock.
    while swapper.is_alive() and not (workspace / "memory" / ".to-alice-dir").is_symlink():
        swapper.join(0.05)
    try:
        assert (workspace / "memory" / ".to-alice-dir").is_symlink(), output
        yield context, alice_file.name
    finally:  # stopped however the test went: a swapper left running holds pytest at exit
        (workspace / "stop").write_text("")
        swapper.join(60)
    assert not swapper.is_alive()
    assert "swaps" in output[0], output  # it raced all along, and ended by itself
    assert int(re.search(r"swaps (\d+)", output[0])[1]) > 1000  # type: ignore[index]
    assert file_hashes(world.workspace) == before["alice"]  # nothing of alice's written or deleted
    assert secret.read_text() == before["secret"]


# What alice's file says (its name, which bob's requests repeat, is marked too).
ALICE_TEXT = marker("file-trip")


def leaked(text: str) -> bool:
    return ALICE_TEXT in text or SERVER_SECRET in text


def test_it_never_crosses_into_another_workspace_or_the_data_dir(race, bob):
    context, alice_name = race
    client = client_for(bob, raise_request_exception=False)
    view = "/memory/files/view/"
    sub = f"memory/sub/{alice_name}"
    tools = {name: get_tool(name) for name in ("read_memory_file", "write_memory_file")}
    tools["list"] = get_tool("list_memory_files")

    def through_the_pages(n: int) -> tuple[int, str]:
        path = ("memory/race.md", "memory/swapped.md", sub)[n % 3]
        match n % 5:
            case 0 | 1:
                response = client.get(view, {"agent": "main", "path": path})
            case 2:
                response = client.post(
                    view, {"agent": "main", "path": path, "text": "bob saved\n", "sha256": ""}
                )
            case 3:
                response = client.get("/memory/files/", {"agent": "main"})
            case _:
                response = client.post("/memory/files/delete/", {"agent": "main", "path": sub})
                client.post("/memory/files/new/", {"agent": "main", "name": f"sub/{alice_name}"})
        return response.status_code, response.content.decode()

    def through_the_tools(n: int) -> tuple[int, str]:
        path = ("memory/race.md", "memory/swapped.md", sub)[n % 3]
        try:
            match n % 4:
                case 0 | 1:
                    text = tools["read_memory_file"].run(context, {"path": path})
                case 2:
                    text = tools["write_memory_file"].run(
                        context, {"path": path, "text": "bob wrote\n"}
                    )
                case _:
                    text = tools["list"].run(context, {})
        except ToolError as exc:
            text = str(exc)
        except Exception as exc:  # what a page would answer with a 500
            return 500, repr(exc)
        return 200, text

    def through_the_indexer(n: int) -> tuple[int, str]:
        try:
            if n % 2:
                index_workspace(bob, "main")
            else:
                index_path(bob, "main", ("memory/race.md", "memory/swapped.md", sub)[n % 3])
        except MemoryPathError as exc:
            return 200, str(exc)
        except Exception as exc:  # the watcher job's or the tool's failure
            return 500, repr(exc)
        return 200, ""

    crossings, errors = [], []
    entry_points = itertools.cycle(
        [through_the_pages] * 3 + [through_the_tools, through_the_indexer]
    )
    for n, attempt in zip(range(ATTEMPTS), entry_points, strict=False):
        status, text = attempt(n)
        if leaked(text):
            crossings.append((attempt.__name__, n, text[:200]))
        if status >= 500:
            errors.append((attempt.__name__, n, status))
    indexed = " ".join(MemoryChunk.objects.filter(owner=bob).values_list("text", flat=True))
    assert crossings == [], f"{len(crossings)} of {ATTEMPTS} crossed"
    assert errors == [], f"{len(errors)} of {ATTEMPTS} failed"
    assert not leaked(indexed)
