"""The web server: daphne, on uvloop's event loop instead of asyncio's own.

Every streamed delta is a few event-loop callbacks on the way in (the LLM's
socket) and out (the channel layer, the websocket); uvloop runs them in C. At
100 chats streaming 50 tokens/s through Redis on one process, the p95 a delta
waits went from 705 to 55-79 ms (bench/chat_latency.py, docs/performance.md).

    python -m neotask_site.web_server [daphne's options] neotask_site.asgi:application
"""

from __future__ import annotations

import asyncio


def main() -> None:
    import uvloop

    # daphne's server module makes its loop when it is imported: after this.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


# A guard, not a plain call: the Markdown renderer's processes start by
# importing the main module again (core/markdown.py).
if __name__ == "__main__":
    main()
