"""Where memory search's page cuts its results off, measured with the real
embedding model (all-MiniLM-L6-v2) on the project's evaluation conversations
(tests/data/memory_eval.json): for each question, the fused top 20 as the page
asks them, split into the evidence turns (relevant) and the others; then for
each candidate rule, how many evidence hits it keeps, how many others it drops
and how many hits a question shows. Last, queries of one common word.

    .venv/bin/python bench/search_cutoff.py [--limit 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLOORS = [0.0, 0.25, 0.3, 0.35, 0.4, 0.45]
RATIOS = [0.0, 0.3, 0.4, 0.5]
# Subjects none of the conversations is about: every hit they get is irrelevant.
OFF_TOPIC = [
    "quantum chromodynamics",
    "How do I file a VAT return for a limited company?",
    "kubernetes pod eviction",
    "the mating season of emperor penguins",
    "Which torque wrench for bicycle carbon seatposts?",
    "medieval Latin grammar",
    "stock options vesting schedule",
    "sourdough starter hydration",
    "compile the Linux kernel with clang",
    "volcanic eruptions in Iceland",
]
STOP = set(
    "the a an and or but to of in on at for with is are was were be been it its i you he she "
    "we they my your our their me him her us them this that so just not no yes do did have has "
    "had what how when where who why can will would could should about from as by up out if "
    "then than too very really oh okay ok haha yeah hey".split()
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, help="only the first N conversations")
    options = parser.parse_args()
    os.environ.setdefault("NEOTASK_DATA_DIR", tempfile.mkdtemp(prefix="search-cutoff-"))
    os.environ.setdefault("NEOTASK_CONFIG", "")
    os.environ["DJANGO_SETTINGS_MODULE"] = "neotask_site.settings"
    import django

    django.setup()
    from django.core.management import call_command

    from memory.evaluation import ingest, load_dataset, throwaway_user
    from memory.search import SearchHit, kept_by_cutoff, search_memory

    call_command("migrate", verbosity=0)
    conversations = load_dataset(ROOT / "tests/data/memory_eval.json")[: options.limit]
    # (cosine, fused / best fused, evidence?) of each event hit of each question
    rows: list[list[tuple[float, float, bool, bool]]] = []
    shown_by_rule: dict[tuple[float, float], list[int]] = {}
    kept = Counter[tuple[float, float]]()
    dropped = Counter[tuple[float, float]]()
    relevant = others = 0
    word_counts: dict[tuple[float, float], list[int]] = {}
    off_counts: dict[tuple[float, float], list[int]] = {}
    off_cosines: list[float] = []
    for conversation in conversations:
        with throwaway_user() as user:
            ingest(user, conversation)
            for question in conversation["questions"]:
                evidence = set(question["evidence"])
                hits = [
                    hit
                    for hit in search_memory(user, question["question"], k=20, files=False)
                    if isinstance(hit, SearchHit)
                ]
                best = max((hit.score for hit in hits), default=1.0) or 1.0
                rows.append(
                    [
                        (
                            hit.branches.get("vector", -1.0),
                            hit.score / best,
                            hit.event.data.get("turn_id") in evidence,
                            "lexical" in hit.branches,
                        )
                        for hit in hits
                    ]
                )
                for floor in FLOORS:
                    for ratio in RATIOS:
                        kept_hits = kept_by_cutoff(hits, floor, ratio)
                        shown_by_rule.setdefault((floor, ratio), []).append(len(kept_hits))
                        for hit in hits:
                            is_evidence = hit.event.data.get("turn_id") in evidence
                            if is_evidence and hit in kept_hits:
                                kept[floor, ratio] += 1
                            elif not is_evidence and hit not in kept_hits:
                                dropped[floor, ratio] += 1
            words = Counter(
                word.strip(".,!?'\"").lower()
                for turn in conversation["turns"]
                for word in turn["text"].split()
            )
            common = [w for w, _ in words.most_common(200) if w.isalpha() and w not in STOP][:10]
            for word in common:
                word_hits = search_memory(user, word, k=20, files=False)
                for floor in FLOORS:
                    for ratio in RATIOS:
                        count = len(kept_by_cutoff(word_hits, floor, ratio))
                        word_counts.setdefault((floor, ratio), []).append(count)
            for query in OFF_TOPIC:
                off_hits = search_memory(user, query, k=20, files=False)
                off_cosines += [
                    h.branches["vector"]
                    for h in off_hits
                    if isinstance(h, SearchHit) and "vector" in h.branches
                ]
                for floor in FLOORS:
                    for ratio in RATIOS:
                        count = len(kept_by_cutoff(off_hits, floor, ratio))
                        off_counts.setdefault((floor, ratio), []).append(count)
    for row in rows:
        relevant += sum(1 for _, _, is_evidence, _ in row if is_evidence)
        others += sum(1 for _, _, is_evidence, _ in row if not is_evidence)
    evidence_cosines = [c for row in rows for c, _, e, _ in row if e and c > -1]
    other_cosines = [c for row in rows for c, _, e, _ in row if not e and c > -1]
    print(f"{len(rows)} questions; in their top 20: {relevant} evidence hits, {others} others")
    named = (("evidence", evidence_cosines), ("others", other_cosines), ("off-topic", off_cosines))
    for name, values in named:
        q = statistics.quantiles(values, n=20)
        print(
            f"cosine of {name}: 5% {q[0]:.2f}, 25% {q[4]:.2f}, median {q[9]:.2f}, "
            f"75% {q[14]:.2f}, 95% {q[18]:.2f}"
        )
    print()
    print(
        "| cosine floor | fused ≥ best x | evidence kept | others dropped | "
        "hits a question | hits a common word | hits off topic |"
    )
    print("|---|---|---|---|---|---|---|")
    for floor in FLOORS:
        for ratio in RATIOS:
            shown = shown_by_rule[floor, ratio]
            words_shown = word_counts.get((floor, ratio), [0])
            print(
                f"| {floor:.2f} | {ratio:.1f} | {kept[floor, ratio] / max(relevant, 1):.1%} | "
                f"{dropped[floor, ratio] / max(others, 1):.1%} | {statistics.mean(shown):.1f} | "
                f"{statistics.mean(words_shown):.1f} | "
                f"{statistics.mean(off_counts.get((floor, ratio), [0])):.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
