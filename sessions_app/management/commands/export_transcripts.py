"""`python manage.py export_transcripts [--user U] [--session KEY_OR_ID] OUT_DIR`:
one append-only `<session id>.jsonl` per session and a `sessions.json` index."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from core.progress import progress_bar
from core.users import find_user
from sessions_app.models import Session
from sessions_app.transcripts import INDEX_NAME, export_session, remove_deleted, write_index


class Command(BaseCommand):
    help = (
        "Export session transcripts as JSONL (one event per line) plus a sessions.json "
        "index. Re-running appends only the events not exported yet."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("out_dir", type=Path, help="directory for the .jsonl files")
        parser.add_argument("--user", help="only this user's sessions (username)")
        parser.add_argument("--session", help="only this session: its key or its id")

    def handle(
        self, *args: Any, out_dir: Path, user: str | None, session: str | None, **options: Any
    ) -> None:
        sessions = list(select_sessions(user, session).select_related("owner", "agent"))
        prepare(out_dir)
        appended = rewritten = pruned = 0
        try:
            with progress_bar(self, sessions, unit="session", ascii=True) as bar:
                for item in bar:
                    export = export_session(item, out_dir)
                    appended += export.appended
                    rewritten += export.rewritten
                    pruned += export.pruned
            removed = remove_deleted(out_dir)
            index = write_index(out_dir, sessions)
        except OSError as exc:
            raise CommandError(f"Cannot write to {out_dir}: {exc}") from None
        self.stdout.write(
            f"Exported {len(sessions)} session{'s' * (len(sessions) != 1)} to {out_dir}: "
            f"{appended} new event{'s' * (appended != 1)} appended, "
            f"{rewritten} damaged transcript{'s' * (rewritten != 1)} rewritten; "
            f"{INDEX_NAME} lists {len(index)} key{'s' * (len(index) != 1)}."
        )
        if pruned or removed:
            self.stdout.write(
                f"Deleted since the last export: {pruned} transcript{'s' * (pruned != 1)} "
                f"rewritten without the deleted events, {removed} of deleted sessions removed."
            )


def select_sessions(username: str | None, key_or_id: str | None) -> QuerySet[Session]:
    sessions = Session.objects.all()
    if username is not None:
        sessions = Session.objects.owned_by(find_user(username))
    if key_or_id is not None:
        sessions = sessions.filter(**session_lookup(key_or_id))
        if not sessions.exists():
            owner = f" of user {username!r}" if username is not None else ""
            raise CommandError(f"No session{owner} has the key or id {key_or_id!r}.")
    # Oldest first: an archived session precedes the one that continues it.
    return sessions.order_by("created_at", "pk")


def session_lookup(key_or_id: str) -> dict[str, Any]:
    try:
        return {"pk": uuid.UUID(key_or_id)}
    except ValueError:
        # A key names every session it has had (resets, compactions).
        return {"key": key_or_id}


def prepare(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise CommandError(f"{out_dir} is a file; give a directory for the transcripts.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"Cannot create {out_dir}: {exc.strerror}.") from None
