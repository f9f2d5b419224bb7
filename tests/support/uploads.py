"""Documents uploaded to a running daphne as a browser does, /healthz asked meanwhile,
and the server's memory read from /proc (for tests and benchmarks, without Django)."""

from __future__ import annotations

import http.client
import re
import threading
import time
import uuid
from http.cookies import SimpleCookie
from pathlib import Path


def status_bytes(pid: int | str, field: str) -> int:
    """A size from /proc/<pid>/status (VmRSS, VmHWM, ...), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def reset_peak(pid: int | str) -> int:
    """Start the process's peak RSS (VmHWM) afresh; returns its RSS now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_bytes(pid, "VmRSS")


class HealthPoller(threading.Thread):
    """Asks /healthz over and over until stopped: each answer's latency in ms, and
    the requests that got none."""

    def __init__(self, port: int, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.interval = interval
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            started = time.perf_counter()
            try:
                connection.request("GET", "/healthz")
                connection.getresponse().read()  # 200, or 503: no job cluster here
                self.latencies.append((time.perf_counter() - started) * 1000)
            except OSError as exc:
                self.failures.append(repr(exc))
            finally:
                connection.close()
            self.stop.wait(self.interval)

    def __enter__(self) -> HealthPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.join()


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    """A form's fields and a file `document`, as a browser encodes them: the body
    and its Content-Type."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="document"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


class Browser:
    """One connection to daphne with the cookies it was given (the flash messages
    travel in one), as a browser keeps them."""

    def __init__(self, port: int, session: str) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.cookies = SimpleCookie({"sessionid": session})

    def request(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[http.client.HTTPResponse, str]:
        cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in self.cookies.items())
        self.connection.request(method, path, body=body, headers={**headers, "Cookie": cookie})
        response = self.connection.getresponse()
        for header in response.headers.get_all("Set-Cookie") or []:
            self.cookies.load(header)
        return response, response.read().decode()

    def add_document(self, name: str, data: bytes) -> str:
        """The files page's form, posted: the message shown on the page it leads to."""
        self.request("GET", "/memory/files/")
        csrf = self.cookies["csrftoken"].value
        body, content_type = multipart({"agent": "main", "csrfmiddlewaretoken": csrf}, name, data)
        origin = f"http://127.0.0.1:{self.port}"
        answer, _ = self.request(
            "POST", "/memory/files/upload/", body, Origin=origin, **{"Content-Type": content_type}
        )
        assert answer.status == 302, answer.status
        _, page = self.request("GET", answer.getheader("Location") or "/")
        return " ".join(re.findall(r"(?:Not added to memory:|Added) [^<]*", page))

    def close(self) -> None:
        self.connection.close()
