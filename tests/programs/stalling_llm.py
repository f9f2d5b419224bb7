"""An LLM endpoint that starts an answer and then stalls, until it is killed:
`python -m tests.programs.stalling_llm` prints its URL and API key, then serves."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from tests.support.scripted_llm import Reply, ScriptedLLM


def stalled() -> Iterator[str]:
    yield from ["Once ", "upon ", "a "]
    threading.Event().wait()


class StallingLLM(ScriptedLLM):
    def next_reply(self, body: dict[str, Any]) -> Reply:
        return Reply(deltas=stalled())


def main() -> None:
    llm = StallingLLM()
    print(llm.url, llm.api_key, flush=True)
    llm.server.serve_forever()


if __name__ == "__main__":
    main()
