"""The embedded models as the picker and the turns see them, without running one:
a fetched model's file as `fetch_model` leaves it, and `manage.py local_llm`
played by a thread over scripted servers (agent.local_model.serving's files)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from agent.model_files import KNOWN_MODELS
from tests.support.scripted_llm import ScriptedLLM

QWEN = "qwen2.5-coder-0.5b"


def fetched(data: Path, name: str = QWEN) -> None:
    """A fetched model's file as `fetch_model` leaves it: its size (sparse) and the
    stamp of its verified hash beside it."""
    model = KNOWN_MODELS[name]
    path = data / "models" / model.filename
    path.parent.mkdir(exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(model.size)
    stat = path.stat()
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": model.sha256}
    path.with_name(f"{path.name}.verified").write_text(json.dumps(stamp))


class FakeModelServer:
    """`manage.py local_llm` as the turns see it: it serves one model at an
    address, and on a request in local_llm.wanted serves the other (a scripted
    server per model)."""

    def __init__(self, data: Path, servers: dict[str, ScriptedLLM], first: str) -> None:
        self.data, self.servers = data, servers
        self.loads = [first]
        self.publish(first)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def publish(self, name: str) -> None:
        address = self.servers[name].url.removesuffix("/v1")
        (self.data / "local_llm.address").write_text(f"{address}\n{name}")

    def watch(self) -> None:
        wanted = self.data / "local_llm.wanted"
        while not self.stop.wait(0.05):
            if wanted.exists() and (name := wanted.read_text()) != self.loads[-1]:
                (self.data / "local_llm.address").unlink()
                self.loads.append(name)
                self.publish(name)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
