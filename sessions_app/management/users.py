"""What the session commands share: finding the user an option names."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError


def find_user(username: str) -> Any:
    user_model = get_user_model()
    try:
        return user_model._default_manager.get(**{user_model.USERNAME_FIELD: username})
    except user_model.DoesNotExist:
        raise CommandError(f"No user named {username!r}.") from None
