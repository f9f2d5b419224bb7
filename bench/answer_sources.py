"""How memory.sources tells an answer that used a memory file from one that did not,
on a real model's answers: the figure behind `MIN_SHARED_WORDS`.

Each case is a chunk of a document (or memory file) in the prompt the way a turn
carries it (agent.prompt: the instructions, then the session's recalled memory
file with its path and page) and a message: one the chunk answers, and one it has
nothing to do with (a later message of the same session, the chunk still in the
prompt). The embedded model answers (greedy decoding, so the same answers each
run). An answer *used* its chunk when it states the chunk's fact (the case's
evidence, e.g. "48,000"; a model that repeats memory unasked used it too). For
each answer the bench prints the content words it shares with the chunk and not
with the message (memory.sources.shared_words) and whether it names the file;
then, per threshold, how many used answers are cited (recall) and how many
unused ones are (false sources).

    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/answer_sources.py
    .venv/bin/python bench/answer_sources.py --model-file path/to/model.gguf --threads 2
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    path: str
    heading: str
    text: str
    asked: str  # a message the chunk answers
    unrelated: str  # a message it has nothing to do with
    nearby: str  # a message on a nearby subject, which the chunk may or may not answer
    evidence: tuple[str, ...]  # what an answer using the chunk states


CASES = [
    Case(
        "memory/docs/Q3 report.md",
        "Page 3",
        "## Page 3 Budget The marketing budget for 2027 is 48,000 euros.",
        "What is the marketing budget for 2027?",
        "Suggest a dinner for tonight. Anything I should avoid?",
        "Draft a short note to the marketing team about next year.",
        ("48,000", "48000", "48 000"),
    ),
    Case(
        "memory/docs/Project Orion plan.md",
        "Page 2",
        "## Page 2 Milestones The Orion prototype ships to the Lisbon lab in March; "
        "Dana Reyes leads the field tests.",
        "When does the Orion prototype ship, and where to?",
        "Write a haiku about autumn.",
        "What should a prototype field test plan include?",
        ("lisbon", "march", "dana"),
    ),
    Case(
        "memory/docs/Lease agreement.md",
        "Page 1",
        "## Page 1 Rent The monthly rent is 1,250 euros, due on the 5th of each month. "
        "The deposit is two months' rent. Pets are allowed with the landlord's written consent.",
        "How much is my rent and when is it due?",
        "What is the capital of Australia?",
        "Can I keep a cat in my flat?",
        ("1,250", "1250", "5th", "consent"),
    ),
    Case(
        "memory/recipes.md",
        "Breakfast > Pancakes",
        "## Pancakes Mix 200 g flour, 2 eggs, 300 ml milk and a pinch of salt; "
        "rest the batter 30 minutes, then fry in butter.",
        "How do I make the pancakes from my recipe notes?",
        "How do I reverse a list in Python?",
        "Suggest a quick breakfast.",
        ("200 g", "300 ml", "flour", "pancake"),
    ),
    Case(
        "memory/docs/Trip.md",
        "Travel plans > Lisbon",
        "## Lisbon The hotel in Lisbon is the Casa Azul, booked for five nights. "
        "Flight TP1234 leaves at 07:40 from terminal 1.",
        "Which hotel am I staying at in Lisbon?",
        "Explain what a mutex is.",
        "What should I see in Lisbon?",
        ("casa azul", "tp1234"),
    ),
    Case(
        "memory/docs/Employee handbook.md",
        "Page 4",
        "## Page 4 Vacation Employees get 25 days of paid vacation a year; unused days "
        "expire on March 31 of the following year.",
        "How many vacation days do I get?",
        "Tell me a joke.",
        "Can I carry unused vacation days over?",
        ("25", "march 31"),
    ),
    Case(
        "memory/docs/Car manual.md",
        "Page 12",
        "## Page 12 Tyres Tyre pressure: 2.4 bar front, 2.2 bar rear. Check it monthly, "
        "when the tyres are cold.",
        "What tyre pressure should I use?",
        "What is 17 times 23?",
        "How do I keep my bike in good shape?",
        ("2.4", "2.2"),
    ),
    Case(
        "MEMORY.md",
        "Work",
        "## Work The sprint review moved to Thursday 14:00 in room Atlas; Priya presents "
        "the search demo.",
        "When is the sprint review?",
        "Translate 'good morning' into Spanish.",
        "Who presents at the sprint review?",
        ("thursday", "atlas", "14:00", "priya"),
    ),
    Case(
        "memory/docs/Garden plan.md",
        "Page 1",
        "## Page 1 Beds Tomatoes go in bed 2 in May, basil beside them; the roses need "
        "pruning in February.",
        "When do the tomatoes go in?",
        "Give me three tips for a job interview.",
        "When should I prune the roses?",
        (" may", "bed 2", "february"),
    ),
    Case(
        "memory/docs/Insurance policy.md",
        "Page 5",
        "## Page 5 Claims Report water damage within 14 days by calling 0800 555 0199; "
        "the excess is 300 euros per claim.",
        "How do I report water damage, and what is the excess?",
        "Summarise the plot of Hamlet in two sentences.",
        "What does home insurance usually cover?",
        ("0800", "14 days", "300"),
    ),
    Case(
        "memory/docs/Wedding checklist.md",
        "Page 2",
        "## Page 2 Venue The venue is Quinta da Serra; the deposit of 2,000 euros is due "
        "by June 1 and the caterer is Sabores.",
        "When is the venue deposit due?",
        "Which is bigger, a blue whale or an elephant?",
        "Who is the caterer?",
        ("june 1", "2,000", "2000", "sabores"),
    ),
    Case(
        "memory/docs/Server runbook.md",
        "Page 3",
        "## Page 3 Backups Backups run nightly at 02:30 to the bucket nt-backups-eu; "
        "restore with scripts/restore.sh and the key in the vault.",
        "Where do the backups go and when do they run?",
        "What does HTTP status 418 mean?",
        "How do I restore a backup?",
        ("02:30", "nt-backups-eu", "nightly", "restore.sh"),
    ),
]


def prompt(case: Case, message: str) -> list[dict[str, str]]:
    """The turn's prompt as agent.prompt words it, the chunk recalled when the
    session started."""
    from django.utils import timezone

    from agent.prompt import DATA, DEFAULT_SYSTEM_PROMPT, context_prompt, session_recall_line

    item = {"source": f"{case.path}:1-4", "date": "memory file", "text": case.text, "score": 0.7}
    if case.heading:
        item["heading"] = case.heading
    block = (
        f"Recalled from earlier conversations when this session started ({DATA}):\n"
        + session_recall_line(item)  # type: ignore[arg-type]
    )
    return [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "system", "content": context_prompt([], timezone.localtime(), [block])},
        {"role": "user", "content": message},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    models = Path(os.environ.get("NEOTASK_TEST_MODELS_DIR", ROOT / ".venv" / "models"))
    parser.add_argument("--model-file", type=Path, default=models / "qwen2.5-coder-0.5b.gguf")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=120)
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neotask_site.settings")
    import django

    django.setup()
    import httpx

    from agent.local_model import start_server
    from memory.sources import PromptChunk, content_words, names_file, shared_words
    from memory.sources import used as cites_chunk

    key = secrets.token_urlsafe(24)
    server = start_server(options.model_file, 0, key, 2048, threads=options.threads)
    rows = []  # (used, shared words, the answer's own words, names the file)
    verdicts = []  # (used, cited by memory.sources as it is)
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=300) as client:
        for case in CASES:
            for message in (case.asked, case.unrelated, case.nearby):
                response = client.post(
                    f"{server.listening_address}/v1/chat/completions",
                    json={"messages": prompt(case, message), "max_tokens": options.tokens},
                )
                response.raise_for_status()
                answer = response.json()["choices"][0]["message"]["content"] or ""
                stated = any(e in answer.lower() for e in case.evidence)
                shared = shared_words(answer, case.text, message)
                new = content_words(answer) - content_words(message)
                named = names_file(answer, case.path, message)
                rows.append((stated, len(shared), len(new), named))
                verdicts.append(
                    (
                        stated,
                        cites_chunk(
                            answer, PromptChunk(case.path, case.heading, case.text), message
                        ),
                    )
                )
                print(
                    f"{'USED ' if stated else 'not  '} shared={len(shared)}/{len(new)} "
                    f"named={int(named)} {sorted(shared)} | {message[:40]!r} -> "
                    f"{' '.join(answer.split())[:160]!r}"
                )
    del server
    used_count = sum(1 for row in rows if row[0])
    print(f"\n{used_count} answers used their chunk, {len(rows) - used_count} did not.")
    print("rule                                   cited/used  cited/unused   (or the file named)")
    for threshold in range(1, 5):
        for short in (False, True):
            rule = f"shared >= {threshold}" + (", or >= half a short answer's" if short else "")

            def cites(shared: int, new: int, named: bool, t: int = threshold, s: bool = short):
                return shared >= t or named or (s and shared > 0 and 2 * shared >= new)

            hit = sum(1 for u, n, w, named in rows if u and cites(n, w, named))
            false = sum(1 for u, n, w, named in rows if not u and cites(n, w, named))
            print(f"{rule:<38} {hit:>4}/{used_count:<5}  {false:>5}/{len(rows) - used_count}")
    hit = sum(1 for stated, cited in verdicts if stated and cited)
    false = sum(1 for stated, cited in verdicts if cited and not stated)
    print(
        f"{'memory.sources as it is':<38} {hit:>4}/{used_count:<5}  "
        f"{false:>5}/{len(rows) - used_count}"
    )


if __name__ == "__main__":
    main()
