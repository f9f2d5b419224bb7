"""A scripted OpenAI-compatible chat-completions server for deterministic tests.

It speaks the real protocol over a real socket: HTTP/1.1, chunked SSE
streaming, tool-call deltas, usage chunks, error statuses, slow and cut
streams. Tests queue the replies they expect and read back the requests.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # many chats connect at once in the benchmarks
    daemon_threads = True


@dataclass
class Reply:
    text: str = ""
    # Default: the text split after each space. An iterator is sent as it yields.
    deltas: Iterable[str] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"}
    usage: dict[str, Any] | None = field(
        default_factory=lambda: {"prompt_tokens": 20, "completion_tokens": 5}
    )
    status: int = 200
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds between chunks
    cut_after: int | None = None  # close the connection after this many deltas
    hold: threading.Event | None = None  # wait for this before sending anything
    raw: list[str] | None = None  # SSE lines sent as they are, instead of the above
    stamp: bool = False  # each delta becomes "[<number>@<send time in ns>]" (benchmarks)
    finish: str | None = None  # the final chunk's finish_reason (default: tool_calls or stop)

    def chunks(self) -> Iterable[str]:
        if self.deltas is not None:
            return self.deltas
        words = self.text.split(" ")
        return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words) if w or i]


def reply_with_tool(name: str, arguments: Any, text: str = "", **fields: Any) -> Reply:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(text=text, tool_calls=[{"name": name, "arguments": raw}], **fields)


class ScriptedLLM:
    def __init__(
        self,
        api_key: str = "test-key",
        port: int = 0,
        models: tuple[str, ...] = ("scripted",),
        host: str = "127.0.0.1",  # "0.0.0.0": containers reach it (tests/image)
    ) -> None:
        self.api_key = api_key  # "": no key asked (as Ollama)
        self.models = models  # what GET /models lists
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []  # each POST's Authorization header ("" if none)
        self.lock = threading.Lock()
        # A given port: a server that replaces a dead one where the app expects it.
        self.server = Server((host, port), self.handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_reply(self, body: dict[str, Any]) -> Reply | None:
        with self.lock:
            self.requests.append(body)
            return self.replies.popleft() if self.replies else None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def authorized(self) -> bool:
                return not llm.api_key or self.headers.get("Authorization") == (
                    f"Bearer {llm.api_key}"
                )

            def do_GET(self) -> None:
                if not self.path.endswith("/v1/models"):
                    return self.fail(404, "no such endpoint")
                if not self.authorized():
                    return self.fail(401, "Invalid API key")
                listed = [{"id": name, "object": "model"} for name in llm.models]
                payload = json.dumps({"object": "list", "data": listed}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with llm.lock:
                    llm.authorizations.append(self.headers.get("Authorization", ""))
                if not self.path.endswith("/chat/completions"):
                    return self.fail(404, "no such endpoint")
                if not self.authorized():
                    return self.fail(401, "Invalid API key")
                reply = llm.next_reply(body)
                if reply is None:
                    return self.fail(500, "the test scripted no reply for this request")
                if reply.hold is not None:
                    reply.hold.wait(timeout=30)
                if reply.status != 200:
                    return self.fail(reply.status, reply.error or "scripted error", reply.headers)
                self.stream(reply)

            def fail(self, status: int, message: str, headers: dict | None = None) -> None:
                payload = json.dumps({"error": {"message": message, "code": status}}).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def send_chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def event(self, payload: dict[str, Any] | str) -> None:
                text = payload if isinstance(payload, str) else json.dumps(payload)
                self.send_chunk(f"data: {text}\n\n".encode())

            def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                return {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion.chunk",
                    "model": "scripted",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }

            def stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if reply.raw is not None:
                    for line in reply.raw:
                        self.send_chunk(f"{line}\n\n".encode())
                    self.send_chunk(b"")
                    return
                self.event(self.chunk({"role": "assistant", "content": ""}))
                for number, text in enumerate(reply.chunks()):
                    if reply.cut_after is not None and number >= reply.cut_after:
                        self.close_connection = True
                        return  # no final chunk: the client sees a broken stream
                    if reply.delay:
                        time.sleep(reply.delay)
                    if reply.stamp:
                        text = f"[{number}@{time.time_ns()}]"
                    self.event(self.chunk({"content": text}))
                for index, call in enumerate(reply.tool_calls):
                    raw = call["arguments"]
                    half = len(raw) // 2  # arguments arrive in pieces, as in real streams
                    call_id = call.get("id", f"call_{len(llm.requests)}_{index}")
                    first = {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call["name"], "arguments": raw[:half]},
                    }
                    self.event(self.chunk({"tool_calls": [first]}))
                    rest = {"index": index, "function": {"arguments": raw[half:]}}
                    self.event(self.chunk({"tool_calls": [rest]}))
                finish = reply.finish or ("tool_calls" if reply.tool_calls else "stop")
                self.event(self.chunk({}, finish))
                if reply.usage is not None:
                    self.event({"id": "chatcmpl-scripted", "choices": [], "usage": reply.usage})
                self.event("[DONE]")
                self.send_chunk(b"")

        return Handler


def main() -> None:
    """Serve the same stamped reply to every request, in a process of its own
    (for benchmarks, so that the server's threads do not compete with the
    clients that measure)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.02)
    options = parser.parse_args()
    llm = ScriptedLLM()
    reply = Reply(deltas=[""] * options.deltas, delay=options.interval, stamp=True)
    llm.next_reply = lambda body: reply  # type: ignore[method-assign]
    host, port = llm.server.socket.getsockname()[:2]
    print(f"http://{host}:{port}/v1 {llm.api_key}", flush=True)
    llm.server.serve_forever()


if __name__ == "__main__":
    main()
