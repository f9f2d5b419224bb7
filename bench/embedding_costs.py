"""What embedding a text costs, by its length and the model call it is in: the
CPU time per text of one call of the model (one thread, as the app runs it)
for texts of a load benchmark's turn (a chat message, an answer of stamped
deltas) and of a few lengths, in calls of 1 to 32 texts; then what
`memory.embeddings.embed_texts` costs a text of 32 of mixed lengths, and 32
answers (it picks its calls: run from another commit to compare).

    .venv/bin/python bench/embedding_costs.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = "the quick brown fox jumps over a lazy dog while reading about trains and sailing".split()


def words(count: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10, help="calls timed per case")
    options = parser.parse_args()
    os.environ.setdefault("NEOTASK_DATA_DIR", tempfile.mkdtemp(prefix="embedding-costs-"))
    os.environ.setdefault("NEOTASK_CONFIG", "")
    os.environ["DJANGO_SETTINGS_MODULE"] = "neotask_site.settings"
    import django

    django.setup()
    from memory.embeddings import embed_texts, get_model

    model = get_model()
    message = "Hello from chat 3, message 7."  # bench/load_clients.py
    answer = "".join(f"[{n}@{time.time_ns()}]" for n in range(5))  # its scripted LLM's 5 deltas
    random.seed(1)
    mixed = [words(random.choice([3, 6, 10, 20, 40, 80, 160, 250])) for _ in range(32)]
    embed_texts(["warm up"])

    def per_text(texts: list[str], embed=lambda texts: list(model.embed(texts, len(texts)))):
        started = time.process_time()
        for _ in range(options.repeat):
            embed(texts)
        return (time.process_time() - started) * 1000 / options.repeat / len(texts)

    print("| text | tokens | " + " | ".join(f"{n} a call" for n in (1, 2, 4, 8, 16, 32)) + " |")
    print("|---|---|" + "---|" * 6)
    for name, text in [
        ("load message", message),
        ("load answer", answer),
        ("16 words", words(14)),
        ("64 words", words(62)),
    ]:
        tokenizer = model.model.tokenizer  # type: ignore[attr-defined]  # fastembed's
        tokens = sum(tokenizer.encode_batch([text])[0].attention_mask)
        costs = " | ".join(f"{per_text([text] * n):.1f} ms" for n in (1, 2, 4, 8, 16, 32))
        print(f"| {name} | {tokens} | {costs} |")
    print(
        f"\nembed_texts: 32 texts of mixed lengths {per_text(mixed, embed_texts):.1f} ms a text, "
        f"32 answers {per_text([answer] * 32, embed_texts):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
