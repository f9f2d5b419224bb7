"""An uploaded document to Markdown, in a process of its own under hard limits.

A document is untrusted, and a small one can unpack to gigabytes: a PDF whose pages
each point at a Flate stream of 70 MB, a DOCX of millions of empty paragraphs. The
web process never parses one. `convert_in_child` hands the bytes to a fresh
interpreter (`python -m memory.conversion`, not a fork of the threaded server) that
caps its own address space, CPU time and output before it reads them, counts what
it decodes (a PDF's streams, together) and what it parses (a DOCX's XML elements
and paragraphs, an HTML page's elements) as it goes (memory.document_formats),
and writes back the Markdown,
at most `[memory] file_max_bytes`, or why the document is refused. The parent kills
it at a wall-clock limit, and runs at most MAX_CONVERSIONS at a time, so uploads in
parallel cannot add up to more than that many children's memory.

No Django here: the child does not set Django up (the web process passes it
the limits, `[memory] file_max_bytes` included).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path
from typing import IO

from memory.document_formats import MB, Converted, DocumentError, Limits, convert

log = logging.getLogger(__name__)

# Conversions running at once in one web process: each child may take Limits.memory_bytes.
MAX_CONVERSIONS = 2
# The child's request line (name and kind) and its answer's first line, at most.
MAX_HEADER_BYTES = 64 * 1024
ROOT = Path(__file__).resolve().parents[1]  # where `memory` is imported from

# The child ----------------------------------------------------------------------


def confine(limits: Limits) -> None:
    """The child's own limits, set before it reads the document; soft and hard
    alike (the CPU's hard limit a second later, so SIGXCPU says why it ended)."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Below the server's priority: on two cores a conversion must not take the
    # core the event loop needs to answer (/healthz, other users' chats).
    os.nice(10)
    # Its answer goes to a file: the Markdown and a line of header, no more.
    answer = limits.text_bytes + MAX_HEADER_BYTES
    resource.setrlimit(resource.RLIMIT_FSIZE, (answer, answer))


def too_much_memory(name: str, limits: Limits) -> str:
    return (
        f"{name} is refused: converting it needs more than {limits.memory_bytes // MB} MB "
        "of memory (a possible decompression bomb)."
    )


def main() -> None:
    """`python -m memory.conversion LIMITS` (JSON): a request line (JSON: name and
    kind) and the document on stdin; an answer line (JSON: kind and pages, or
    `refused` and why) and the Markdown on stdout."""
    limits = Limits(**json.loads(sys.argv[1]))
    confine(limits)
    stdin = sys.stdin.buffer
    request = json.loads(stdin.readline(MAX_HEADER_BYTES))
    name = request["name"]
    # Made first: when memory runs out, there may be no room left to make it.
    answer: dict[str, object] = {"refused": too_much_memory(name, limits)}
    markdown = ""
    try:
        converted = convert(name, request["kind"], stdin.read(), limits)
    except DocumentError as exc:
        answer = {"refused": str(exc)}
    except MemoryError:
        pass  # the answer made first
    else:
        answer = {"kind": converted.kind, "pages": converted.pages}
        markdown = converted.markdown
    stdout = sys.stdout.buffer
    stdout.write(json.dumps(answer).encode() + b"\n")
    stdout.write(markdown.encode("utf-8"))
    stdout.flush()


# The parent ---------------------------------------------------------------------

conversions = threading.BoundedSemaphore(MAX_CONVERSIONS)
# An upload: its bytes, or the file it was received into, read from its start.
Upload = bytes | IO[bytes]
COPY_CHUNK = 1024 * 1024


def convert_in_child(name: str, kind: str, data: Upload, limits: Limits) -> Converted:
    """`convert`, in a child process under `limits`; DocumentError when it refuses
    the document or is stopped."""
    if not conversions.acquire(timeout=limits.wall_seconds):
        raise DocumentError(
            f"{name} is not converted: Neotask is busy converting other documents. "
            "Try again in a minute."
        )
    try:
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
        ):
            stdin.write(json.dumps({"name": name, "kind": kind}).encode() + b"\n")
            if isinstance(data, bytes):
                stdin.write(data)
            else:  # copied file to file: the web process never holds the upload
                shutil.copyfileobj(data, stdin, COPY_CHUNK)
            stdin.seek(0)
            ended = run_child(limits, stdin, stdout, stderr)
            return answer_of(name, limits, ended, stdout, stderr)
    finally:
        conversions.release()


def run_child(limits: Limits, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> int | None:
    """The child's exit code (negative: the signal that ended it), None when it
    ran past the wall-clock limit and was killed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "memory.conversion", json.dumps(asdict(limits))],
        cwd=ROOT,  # the same `memory` as this process's
        # Nothing of the server's environment (its secrets) reaches the converter.
        env={"PATH": os.defpath, "LANG": "C.UTF-8"},
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        return process.wait(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.poll() is None:  # past the limit, or this request was cancelled
            process.kill()
            process.wait()


def answer_of(
    name: str, limits: Limits, ended: int | None, stdout: IO[bytes], stderr: IO[bytes]
) -> Converted:
    if ended is None:
        raise DocumentError(
            f"{name} is refused: converting it took longer than {limits.wall_seconds:g} s."
        )
    if ended == -signal.SIGXCPU:
        raise DocumentError(
            f"{name} is refused: converting it needs more than {limits.cpu_seconds} s of CPU time."
        )
    stdout.seek(0)
    try:
        answer = json.loads(stdout.readline(MAX_HEADER_BYTES)) if ended == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - 2000))
        tail = stderr.read().decode("utf-8", "replace")
        log.warning("The document converter ended with %s: %s", ended, tail)
        if "MemoryError" in tail:
            raise DocumentError(too_much_memory(name, limits))
        raise DocumentError(
            f"{name} is refused: the converter stopped on it (exit code {ended}); it may "
            "need more memory or time than a document is allowed."
        )
    if "refused" in answer:
        raise DocumentError(str(answer["refused"]))
    markdown = stdout.read(limits.text_bytes + 1).decode("utf-8")
    pages = answer.get("pages")
    return Converted(str(answer["kind"]), markdown, pages if isinstance(pages, int) else None)


if __name__ == "__main__":
    main()
