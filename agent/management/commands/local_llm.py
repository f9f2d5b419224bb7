"""`python manage.py local_llm [--port P] [--address-file F]`: serve the embedded
model until stopped.

The API key comes from NEOTASK_LOCAL_LLM_KEY (not the command line, where other
local users could read it); `manage.py serve` generates it. With port 0 (the
default) the server binds a port the kernel picks and writes its address to
the address file: no port is probed and freed first for another local user to
take in between.

It is the one process that loads embedded models, one at a time: it starts with
[llm]'s, and when a turn asks for another (agent.local_model.serving, through the
data dir's local_llm.wanted) it stops the model it serves and loads that one.
After each load it puts the fixed prefix every turn starts with (instructions and
tool schemas) into llama.cpp's prompt cache, in the background: restored from
what a previous start saved, or evaluated once and saved (docs/models.md).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.llm import LOCAL_KEY_VARIABLE
from agent.local_model import (
    SLOTS,
    LocalModelError,
    default_model,
    failure_file,
    fallback_file,
    model_to_load,
    start_server,
    state_file,
    write_whole,
)
from agent.prompt import fixed_prefix

POLL_SECONDS = 0.2  # how often the wanted model is looked at
WARM_TIMEOUT = 600.0


def prefix_file(name: str, path: Path, body: dict[str, Any]) -> str:
    """The saved prefix's file name: the model and the prefix it holds (a new
    model file or new instructions or tools make another)."""
    identity = json.dumps([path.name, path.stat().st_size, body], sort_keys=True)
    return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.bin"


def prefix_request() -> dict[str, Any]:
    """A request of the fixed prefix (and a word of a question) for one token."""
    messages, tools = fixed_prefix()
    return {
        "messages": [*messages, {"role": "user", "content": "Hi"}],
        "tools": tools,
        "max_tokens": 1,
        "cache_prompt": True,
    }


def server_for(path: Path, port: int, api_key: str) -> Any:
    """llama.cpp's server for the model at `path`, as [llm] says, with the folder
    of the fixed prefix's saved prompt cache (the same for `--prepare` and a load)."""
    llm = settings.NEOTASK["llm"]
    slot_dir = state_file("prefix")
    slot_dir.mkdir(exist_ok=True)
    return start_server(
        path,
        port,
        api_key,
        llm["context_window"],
        threads=llm["local_model_threads"],
        slot_dir=slot_dir,
    )


def warm(address: str, api_key: str, name: str, path: Path, slot_dir: Path) -> None:
    """Every slot's prompt cache holds the fixed prefix: restored from the file a
    previous start (or `--prepare`) saved (milliseconds), or evaluated once — a
    request of the prefix and a one-token answer (cache_prompt) — and saved for
    the next start. A turn whose prompt starts with those tokens then evaluates
    only what follows (llama.cpp picks the idle slot whose cache shares the most
    of its prompt)."""
    body = prefix_request()
    saved = prefix_file(name, path, body)
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=address, headers=headers, timeout=WARM_TIMEOUT) as client:

        def slot(number: int, action: str) -> bool:
            url = f"/slots/{number}?action={action}"
            return client.post(url, json={"filename": saved}).status_code == 200

        restored = (slot_dir / saved).is_file() and slot(0, "restore")
        # Restored, it evaluates only the prompt's last tokens: the model's weights are
        # paged in and its buffers set up before a turn needs them.
        client.post("/v1/chat/completions", json={**body, "id_slot": 0}).raise_for_status()
        if not restored and slot(0, "save"):
            for old in slot_dir.glob(f"{name}-*.bin"):  # earlier prefixes of this model
                if old.name != saved:
                    old.unlink(missing_ok=True)
        for number in range(1, SLOTS):
            slot(number, "restore")


def warm_quietly(address: str, api_key: str, name: str, path: Path, warming: Path) -> None:
    try:
        warm(address, api_key, name, path, state_file("prefix"))
    except (httpx.HTTPError, OSError):
        pass  # a cold cache only costs the first turn its time
    finally:
        with contextlib.suppress(OSError):
            if warming.read_text() == name:  # not the next model's
                warming.unlink()


class Command(BaseCommand):
    help = "Serve the embedded local model on 127.0.0.1 (started by `manage.py serve`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=0, help="0: any free port")
        parser.add_argument("--address-file", type=Path, help="where to write the address")
        parser.add_argument(
            "--no-warm", action="store_true", help="do not evaluate the fixed prefix after a load"
        )
        parser.add_argument(
            "--prepare",
            action="store_true",
            help="evaluate and save the default model's fixed prefix, then exit (make run)",
        )

    def handle(
        self,
        *args: Any,
        port: int,
        address_file: Path | None,
        no_warm: bool,
        prepare: bool,
        **options: Any,
    ) -> None:
        if prepare:
            return self.prepare()
        api_key = os.environ.get(LOCAL_KEY_VARIABLE, "")
        if len(api_key) < 16:
            raise CommandError(f"{LOCAL_KEY_VARIABLE} must hold the API key (16+ characters)")
        self.api_key, self.port, self.warm = api_key, port, not no_warm
        self.address_file = address_file
        wanted = state_file("wanted")
        wanted.unlink(missing_ok=True)  # a previous run's
        name = default_model(settings.NEOTASK["llm"])
        server = self.load(name)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            while not stop.wait(POLL_SECONDS):
                try:
                    asked = wanted.read_text().strip()
                except OSError:
                    continue
                if asked and asked != name:
                    self.unpublish()
                    del server  # one model in memory: the old one goes before the new loads
                    gc.collect()
                    name = asked
                    try:
                        server = self.load(name)
                    except CommandError:  # the turn that asked says why; the rest go on
                        name = default_model(settings.NEOTASK["llm"])
                        server = self.load(name)
        finally:
            self.unpublish()
            wanted.unlink(missing_ok=True)
        del server  # stops the server's threads

    def prepare(self) -> None:
        """The first start's warm-up done beforehand, by `make run` before it serves:
        the first turn then restores the prefix as after any restart instead of
        waiting for it to be evaluated (half a minute and more on two cores)."""
        llm = settings.NEOTASK["llm"]
        if llm["base_url"]:
            return  # the turns go to a configured server; `serve` starts no embedded model
        name = default_model(llm)
        try:
            path, _ = model_to_load(llm, name)
        except LocalModelError as exc:
            raise CommandError(str(exc)) from None
        slot_dir = state_file("prefix")
        if (slot_dir / prefix_file(name, path, prefix_request())).is_file():
            self.stdout.write(f"The embedded model {path.name} is ready.")
            return
        self.stdout.write(
            f"Preparing the embedded model {path.name} for its first answer (once, about a minute)…"
        )
        started = time.monotonic()
        key = secrets.token_urlsafe(24)  # a server of its own, published nowhere
        try:
            server = server_for(path, 0, key)
            warm(server.listening_address, key, name, path, slot_dir)
        except (LocalModelError, httpx.HTTPError) as exc:
            raise CommandError(f"The embedded model could not be prepared: {exc}") from None
        del server  # stops the server's threads
        self.stdout.write(f"Prepared in {time.monotonic() - started:.0f} s.")

    def load(self, name: str) -> Any:
        llm = settings.NEOTASK["llm"]
        try:
            path, fallback = model_to_load(llm, name)
            if fallback:
                self.stderr.write(fallback)
                fallback_file().write_text(fallback)
            else:
                fallback_file().unlink(missing_ok=True)
            started = time.monotonic()
            server = server_for(path, self.port, self.api_key)
        except LocalModelError as exc:
            failure_file().write_text(str(exc))
            raise CommandError(str(exc)) from None
        failure_file().unlink(missing_ok=True)
        address = server.listening_address
        warming = state_file("warming")
        if self.warm:
            warming.write_text(name)
            threading.Thread(
                target=warm_quietly, args=(address, self.api_key, name, path, warming), daemon=True
            ).start()
        # The address names the model it serves: a turn waiting for a switch reads both.
        write_whole(state_file("address"), f"{address}\n{name}")
        if self.address_file is not None and self.address_file != state_file("address"):
            write_whole(self.address_file, f"{address}\n{name}")
        self.stdout.write(
            f"Embedded model {path.name} loaded in {time.monotonic() - started:.1f} s, "
            f"serving on {address}"
        )
        return server

    def unpublish(self) -> None:
        state_file("address").unlink(missing_ok=True)
        if self.address_file is not None:
            self.address_file.unlink(missing_ok=True)
        state_file("warming").unlink(missing_ok=True)
