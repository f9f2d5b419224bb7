"""`python manage.py memory_eval DATASET.json [--k 5 --k 10] [--conversation ID] [--json]`"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.memory_eval import evaluate
from core.progress import progress_bar
from memory.evaluation import DatasetError, load_dataset


class Command(BaseCommand):
    help = "Measure recall@k of each memory search branch on a conversation dataset."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dataset", type=Path)
        parser.add_argument("--k", type=int, action="append", dest="ks", help="repeatable")
        parser.add_argument("--json", action="store_true", help="print JSON only")
        parser.add_argument("--limit", type=int, help="use only the first N conversations")
        parser.add_argument(
            "--conversation",
            action="append",
            dest="only",
            metavar="ID",
            help="use only this conversation (repeatable): a fold of the dataset",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ks = sorted(set(options["ks"] or [5, 10]))
        if ks[0] < 1:
            raise CommandError("--k must be at least 1")
        try:
            conversations = load_dataset(options["dataset"])
        except DatasetError as exc:
            raise CommandError(str(exc)) from None
        if options["only"]:
            if unknown := set(options["only"]) - {c["id"] for c in conversations}:
                raise CommandError(f"no conversation {', '.join(sorted(unknown))} in the dataset")
            conversations = [c for c in conversations if c["id"] in options["only"]]
        conversations = conversations[: options["limit"]] if options["limit"] else conversations
        total = sum(len(c["questions"]) for c in conversations)
        quiet = options["json"]
        with progress_bar(self, total=total, unit="question", disable=quiet) as bar:
            report = evaluate(conversations, ks, progress=bar.update)
        if quiet:
            self.stdout.write(json.dumps(report, indent=2))
            return
        self.stdout.write(
            f"{report['conversations']} conversations, {report['questions']} questions"
        )
        self.stdout.write("branch    " + "".join(f"recall@{k:<5}" for k in ks))
        for branch, recalls in report["recall"].items():
            self.stdout.write(f"{branch:<10}" + "".join(f"{recalls[str(k)]:<12.3f}" for k in ks))
        context = report["context"]
        self.stdout.write(
            f"context: recall {context['recall']:.3f} with {context['mean_items']:.1f} memory "
            f"items, about {context['mean_tokens']:.0f} tokens (a fresh session's first turn)"
        )
        if report["categories"]:
            self.stdout.write(
                "category      questions " + "".join(f"fused@{k:<6}" for k in ks) + "context"
            )
            for name, figures in report["categories"].items():
                self.stdout.write(
                    f"{name:<14}{figures['questions']:<10}"
                    + "".join(f"{figures['fused'][str(k)]:<12.3f}" for k in ks)
                    + f"{figures['context']:.3f}"
                )
