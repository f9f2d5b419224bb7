"""`python manage.py local_llm [--port P] [--address-file F]`: serve the embedded
model until stopped.

The API key comes from NEOTASK_LOCAL_LLM_KEY (not the command line, where other
local users could read it); `manage.py serve` generates it. With port 0 (the
default) the server binds a port the kernel picks and writes its address to
the address file: no port is probed and freed first for another local user to
take in between.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.llm import LOCAL_KEY_VARIABLE
from agent.local_model import (
    LocalModelError,
    failure_file,
    fallback_file,
    model_to_load,
    start_server,
)


class Command(BaseCommand):
    help = "Serve the embedded local model on 127.0.0.1 (started by `manage.py serve`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=0, help="0: any free port")
        parser.add_argument("--address-file", type=Path, help="where to write the address")

    def handle(self, *args: Any, port: int, address_file: Path | None, **options: Any) -> None:
        api_key = os.environ.get(LOCAL_KEY_VARIABLE, "")
        if len(api_key) < 16:
            raise CommandError(f"{LOCAL_KEY_VARIABLE} must hold the API key (16+ characters)")
        llm = settings.NEOTASK["llm"]
        try:
            path, fallback = model_to_load(llm)
            if fallback:
                self.stderr.write(fallback)
                fallback_file().write_text(fallback)
            else:
                fallback_file().unlink(missing_ok=True)
            started = time.monotonic()
            server = start_server(
                path, port, api_key, llm["context_window"], threads=llm["local_model_threads"]
            )
        except LocalModelError as exc:
            failure_file().write_text(str(exc))
            raise CommandError(str(exc)) from None
        failure_file().unlink(missing_ok=True)
        address = server.listening_address
        if address_file is not None:
            # Whole or absent: the reader never sees half an address.
            partial = address_file.with_name(f".{address_file.name}.partial")
            partial.write_text(address)
            partial.replace(address_file)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(
            f"Embedded model {path.name} loaded in {time.monotonic() - started:.1f} s, "
            f"serving on {address}"
        )
        stop.wait()
        if address_file is not None:
            address_file.unlink(missing_ok=True)
        del server  # stops the server's threads
