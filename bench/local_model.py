"""The embedded model's speed idle and with a busy core: first-token time and tokens/s.

Serves an embedded model (`--model`: the bundled SmolLM2-135M or a model fetched
and verified by `manage.py fetch_model`; NEOTASK_DATA_DIR says where it is) with
agent.local_model.start_server (as `manage.py local_llm` does) and streams short
answers over its OpenAI-compatible API, `--answers` per case and `--tokens`
tokens each (end of text ignored, so every answer is as long). The cases,
interleaved within each repetition:

- idle: nothing else running (but whatever else the machine runs);
- cluster: a job cluster's real work, memory.embeddings.embed_texts over
  varied texts in a loop, in a process of its own, at the priority
  `manage.py serve` gives the job cluster (or each `--cluster-nice`);
- spinner: a plain Python busy loop at normal priority.

The load processes start once, before the first case, and are paused
(SIGSTOP) outside their cases. tokens/s is measured from the first streamed
token to the last; first token from sending the request. A busy/idle ratio is
the median of the busy case over the median of idle.

    .venv/bin/python bench/local_model.py                       # the app's settings
    .venv/bin/python bench/local_model.py --threads 1 2 --poll 0 50 --cluster-nice 0 19
    NEOTASK_DATA_DIR=data .venv/bin/python bench/local_model.py \
        --model qwen2.5-coder-0.5b --idle-only
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = "Tell me a long story about a lighthouse keeper and her cat."
WORDS = (
    "the agent remembers a fact about the user who asked for a summary of the meeting notes "
    "and a reminder to water the plants every morning before the train leaves at eight"
).split()


def setup_django() -> None:
    """The app's settings with a data dir of the benchmark's (its children's too)."""
    os.environ.setdefault("NEOTASK_DATA_DIR", tempfile.mkdtemp(prefix="bench-local-model-"))
    os.environ.update(DJANGO_SETTINGS_MODULE="neotask_site.settings", NEOTASK_CONFIG="")
    import django

    django.setup()


def cluster_load() -> None:
    """A job cluster's work: embedding batches of chat-sized texts, forever."""
    from memory.embeddings import embed_texts

    rng = random.Random(1)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(5, 150))) for _ in range(256)]
    embed_texts(texts[:1])
    print("ready", flush=True)
    while True:
        embed_texts(texts)


def spinner_load() -> None:
    print("ready", flush=True)
    while True:
        pass


def start_load(kind: str, nice: int) -> subprocess.Popen:
    from neotask_site.management.commands.serve import at_nice

    command = at_nice([sys.executable, __file__, "--load", kind], nice)
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the {kind} load did not start")
    process.send_signal(signal.SIGSTOP)
    return process


def stream_answer(client: Any, url: str, tokens: int) -> tuple[float, float]:
    """(first-token seconds, tokens/s) of one streamed answer."""
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    sent = time.perf_counter()
    stamps: list[float] = []
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                stamps.append(time.perf_counter())
    if len(stamps) < 2:
        raise SystemExit(f"the model streamed {len(stamps)} tokens")
    return stamps[0] - sent, (len(stamps) - 1) / (stamps[-1] - stamps[0])


def spread(values: list[float], digits: int) -> list[float]:
    return [round(v, digits) for v in (min(values), statistics.median(values), max(values))]


def measure(options: argparse.Namespace, threads: int, poll: int) -> list[dict[str, Any]]:
    import httpx

    from agent.local_model import bundled_model_path, fetched_model_path, start_server
    from agent.model_files import BUNDLED_MODEL

    # No fallback here: a missing or unverified model is an error, not another model's figures.
    name = options.model
    path = bundled_model_path() if name == BUNDLED_MODEL else fetched_model_path(name)
    key = secrets.token_urlsafe(24)
    server = start_server(path, 0, key, 2048, threads=threads, poll=poll)
    url = server.listening_address
    loads: dict[str, subprocess.Popen | None] = {"idle": None}
    if not options.idle_only:
        for nice in options.cluster_nice:
            loads[f"cluster, nice {nice}"] = start_load("cluster", nice)
        loads["spinner, nice 0"] = start_load("spinner", 0)
    samples: dict[str, list[tuple[float, float]]] = {case: [] for case in loads}
    try:
        # A new connection per answer: the server closes idle ones.
        with httpx.Client(
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
            limits=httpx.Limits(max_keepalive_connections=0),
        ) as client:
            stream_answer(client, url, 8)  # warm up
            for _ in range(options.repeat):
                for case, load in loads.items():
                    if load is not None:
                        load.send_signal(signal.SIGCONT)
                        time.sleep(0.5)  # let it get going
                    for _ in range(options.answers):
                        samples[case].append(stream_answer(client, url, options.tokens))
                    if load is not None:
                        load.send_signal(signal.SIGSTOP)
    finally:
        for load in loads.values():
            if load is not None:
                load.kill()
                load.wait()
        del server
    idle_rate = statistics.median(rate for _, rate in samples["idle"])
    rows = []
    for case, values in samples.items():
        firsts = [first * 1000 for first, _ in values]
        rates = [rate for _, rate in values]
        rows.append(
            {
                "threads": threads,
                "poll": poll,
                "case": case,
                "answers": len(values),
                "tokens_per_s": spread(rates, 1),
                "first_token_ms": spread(firsts, 0),
                "of_idle": round(statistics.median(rates) / idle_rate, 2),
            }
        )
    return rows


def main() -> None:
    setup_django()
    from django.conf import settings

    from agent.local_model import default_threads
    from agent.model_files import LOCAL_MODEL_NAMES
    from neotask_site.management.commands.serve import JOB_CLUSTER_NICE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", choices=LOCAL_MODEL_NAMES, default=settings.NEOTASK["llm"]["local_model"]
    )
    parser.add_argument("--idle-only", action="store_true", help="no load processes")
    parser.add_argument("--threads", type=int, nargs="+", default=[default_threads()])
    parser.add_argument("--poll", type=int, nargs="+", default=[0], help="llama.cpp's poll, 0-100")
    parser.add_argument("--cluster-nice", type=int, nargs="+", default=[JOB_CLUSTER_NICE])
    parser.add_argument("--answers", type=int, default=3, help="answers per case and repetition")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of all cases, interleaved")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--load", choices=["cluster", "spinner"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.load:
        {"cluster": cluster_load, "spinner": spinner_load}[options.load]()
    # Stopped by a signal, the load processes are still killed (measure's finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    configurations = list(itertools.product(options.threads, options.poll))
    if options.json:
        rows = [row for config in configurations for row in measure(options, *config)]
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{options.model}, {os.cpu_count()} cores, {options.tokens}-token answers; "
        "min / median / max"
    )
    print("threads  poll  case               answers  tokens/s            first token ms  of idle")
    for config in configurations:
        for row in measure(options, *config):
            rates = " / ".join(f"{v:.1f}" for v in row["tokens_per_s"])
            firsts = " / ".join(f"{v:.0f}" for v in row["first_token_ms"])
            print(
                f"{row['threads']:>7}  {row['poll']:>4}  {row['case']:<17}  {row['answers']:>7}  "
                f"{rates:<18}  {firsts:<14}  {row['of_idle']:>7.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
