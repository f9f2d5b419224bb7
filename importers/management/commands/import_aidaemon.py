"""`python manage.py import_aidaemon DB --user U [--agent NAME] [--dry-run]`."""

from __future__ import annotations

from importers.command import ImportCommand


class Command(ImportCommand):
    help = (
        "Import an aidaemon database (conversations, facts, macros, scheduled tasks, "
        "terminal prefixes) for one user. Safe to run again: nothing is imported twice."
    )
    kind = "aidaemon"
    path_help = "the aidaemon SQLite database (read only)"
