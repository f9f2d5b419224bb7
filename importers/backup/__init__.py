"""Backups of a whole Neotask installation: `manage.py backup` and `manage.py restore`.

One .tar holds a consistent snapshot of the database (`snapshot`), the agents'
workspaces (`archive`), and a manifest of counts and checksums (`manifest`);
`restore` checks all of it before it writes anything.
"""

from __future__ import annotations


class BackupError(Exception):
    """A backup or restore that cannot go on, worded for the person running it."""
