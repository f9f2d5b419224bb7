"""Finding the user someone named: a command's `--user`, config.toml's `owner`."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from core.ownership import Owner


class UnknownUser(CommandError):
    """Nobody has that username. A CommandError, so that a command needs no
    handler of its own to print it."""


def find_user(username: str) -> Owner:
    """The user with this username (exactly as typed); UnknownUser naming it otherwise."""
    users = get_user_model()
    try:
        return users._default_manager.get(**{users.USERNAME_FIELD: username})
    except users.DoesNotExist:
        raise UnknownUser(f'There is no user "{username}".') from None
