"""Issue 40, item 1: the child process that converts a document, under its limits:
memory, CPU time, wall-clock time, conversions at once, and an environment
without the server's secrets. Each limit alone, the others lifted so that it is
the one reached; the bombs themselves are in test_document_bombs."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from core.history import Actor
from memory import conversion, documents
from memory.workspace import workspace_dir
from tests.support.documents import nothing_written, per_page_streams_pdf

MB = 1024 * 1024
BOMB = per_page_streams_pdf(6)  # six pages of 70 MB each once unpacked


@pytest.fixture
def workspace(alice) -> Path:
    return workspace_dir(alice.pk, "main", create=False)


def refusal(alice, monkeypatch, **constants) -> str:
    monkeypatch.setattr(documents, "MAX_PDF_DECODED_BYTES", 100 * 1024 * MB)
    for constant, value in constants.items():
        monkeypatch.setattr(documents, constant, value)
    with pytest.raises(documents.DocumentError) as refused:
        documents.add_document(alice, "main", "bomb.pdf", BOMB, Actor.user(alice))
    return str(refused.value)


def test_a_conversion_past_its_memory_is_refused(alice, workspace, monkeypatch):
    message = refusal(alice, monkeypatch, CONVERSION_MEMORY_BYTES=200 * MB)
    assert message == (
        "bomb.pdf is refused: converting it needs more than 200 MB of memory "
        "(a possible decompression bomb)."
    )
    assert nothing_written(alice, workspace)


def test_a_conversion_past_its_cpu_time_is_refused(alice, workspace, monkeypatch):
    message = refusal(
        alice, monkeypatch, CONVERSION_MEMORY_BYTES=2048 * MB, CONVERSION_CPU_SECONDS=1
    )
    assert message == "bomb.pdf is refused: converting it needs more than 1 s of CPU time."
    assert nothing_written(alice, workspace)


def test_a_conversion_past_its_wall_clock_time_is_killed_and_refused(alice, workspace, monkeypatch):
    message = refusal(alice, monkeypatch, CONVERSION_WALL_SECONDS=0.5)
    assert message == "bomb.pdf is refused: converting it took longer than 0.5 s."
    assert nothing_written(alice, workspace)
    assert converters() == []  # killed, not left running


def converters() -> list[int]:
    """The converter processes this process has started and not yet reaped."""
    found = []
    for thread in Path(f"/proc/{os.getpid()}/task").iterdir():  # each lists its own
        for child in (thread / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError):  # reaped meanwhile
                if b"memory.conversion" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
    return found


def test_uploads_past_the_conversions_at_once_wait_then_are_refused(alice, monkeypatch):
    monkeypatch.setattr(documents, "CONVERSION_WALL_SECONDS", 0.5)
    held = [conversion.conversions.acquire(timeout=5) for _ in range(conversion.MAX_CONVERSIONS)]
    try:
        with pytest.raises(documents.DocumentError, match="busy converting other documents"):
            documents.convert("notes.md", b"# Notes")
    finally:
        for _ in filter(None, held):
            conversion.conversions.release()
    assert "# Notes" in documents.convert("notes.md", b"# Notes").markdown


def test_the_converter_gets_none_of_the_servers_environment(monkeypatch):
    """Whatever a document makes of the converter, the server's secrets are not there."""
    monkeypatch.setenv("NEOTASK_SECRET_KEY", "s3cret-of-the-server")
    refused: list[str] = []

    def convert_bomb() -> None:
        try:
            documents.convert("bomb.pdf", BOMB)
        except documents.DocumentError as exc:
            refused.append(str(exc))

    converting = threading.Thread(target=convert_bomb)
    converting.start()
    try:
        deadline = time.monotonic() + 30
        while not (started := converters()) and time.monotonic() < deadline:
            time.sleep(0.01)
        environment = Path(f"/proc/{started[0]}/environ").read_bytes().split(b"\0")
    finally:
        converting.join()
    assert sorted(variable.split(b"=")[0] for variable in environment if variable) == [
        b"LANG",
        b"PATH",
    ]
    assert "streams unpack to more than 100 MB" in refused[0]
