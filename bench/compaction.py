"""Compaction of a 500-message session, excluding the time spent in the LLM.

The scripted LLM answers at once; the time inside the two LLM calls (memory
flush, summary) is measured and subtracted. Loopback only.

    .venv/bin/python bench/compaction.py [--messages 500] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(
            NEOTASK_DATA_DIR=data_dir,
            NEOTASK_CONFIG="",
            DJANGO_SETTINGS_MODULE="neotask_site.settings",
        )
        from tests.support.scripted_llm import Reply, ScriptedLLM

        with ScriptedLLM() as llm:
            os.environ.update(NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
            import django

            django.setup()
            from django.contrib.auth import get_user_model
            from django.core.management import call_command

            from agent import llm as llm_module
            from memory import recording
            from memory.tasks import embedding_queue_paused
            from sessions_app import chat
            from sessions_app.compaction import compact

            call_command("migrate", verbosity=0)
            user = get_user_model().objects.create_user("bench")
            in_llm = 0.0
            original = llm_module.LLMClient.stream

            async def timed_stream(self, *args, **kwargs):
                nonlocal in_llm
                started = time.perf_counter()
                try:
                    return await original(self, *args, **kwargs)
                finally:
                    in_llm += time.perf_counter() - started

            llm_module.LLMClient.stream = timed_stream  # type: ignore[method-assign]
            samples = []
            for _ in range(options.runs):
                session = chat.start_chat(user)
                with embedding_queue_paused():
                    for number in range(options.messages):
                        kind = "user_message" if number % 2 == 0 else "assistant_response"
                        recording.record(
                            user,
                            str(session.pk),
                            kind,
                            {"content": f"message {number} " + "words " * 30},
                        )
                llm.script(Reply(text="DONE"), Reply(text="- a summary"))
                in_llm = 0.0
                started = time.perf_counter()
                asyncio.run(compact(session))
                samples.append(time.perf_counter() - started - in_llm)
    print(
        f"compaction of {options.messages} messages, excluding LLM time: "
        f"median {statistics.median(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms "
        f"({options.runs} runs)"
    )


if __name__ == "__main__":
    main()
