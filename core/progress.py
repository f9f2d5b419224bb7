"""Progress: what long work reports as it goes, and the bars commands show it in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand
from tqdm import tqdm

# Called with the number of units just finished; a tqdm bar's `update` fits.
Progress = Callable[[int], object]


def no_progress(done: int) -> None:
    return None


def progress_bar(command: BaseCommand, iterable: Any = None, **options: Any) -> tqdm:
    """A tqdm bar on the command's own stderr (call_command's stderr=, so tests
    and callers see it), not on sys.stderr."""
    # OutputWrapper's stream: its stubs leave the attribute out.
    stream = cast(TextIO, command.stderr._out)
    return tqdm(iterable, file=stream, **options)
