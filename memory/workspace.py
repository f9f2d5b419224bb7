"""Each agent's workspace: a directory under the data dir, per owner and agent.

The agent's name is that directory's name and a part of its session keys
(agent:<name>:web:<chat>) and URLs, so one rule holds for all of them: no ':' or '/',
no leading '.' (a hidden folder, '..'), and no leading '-' or '_' either, which no
session key has ever accepted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeGuard

from django.conf import settings
from django.core.exceptions import ValidationError

# Named in config.toml's defaults, so stated there; the apps import it from here.
from core.config import DEFAULT_AGENT as DEFAULT_AGENT

# Compared with fullmatch: "$" alone would let a trailing newline through. The pattern
# text is also that of Agent.name's validator in sessions_app's migration 0001.
AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
AGENT_NAME_RULE = "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"


class AgentNameError(ValueError):
    """A name that cannot be an agent's; the message says the rule."""


def is_agent_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and AGENT_NAME.fullmatch(name) is not None


def check_agent_name(name: object) -> str:
    if not is_agent_name(name):
        raise AgentNameError(f"agent {name!r} must be {AGENT_NAME_RULE}")
    return name


def validate_agent_name(value: object) -> None:
    """`check_agent_name` as a validator of Django forms."""
    try:
        check_agent_name(value)
    except AgentNameError as exc:
        raise ValidationError(str(exc), code="invalid") from None


def workspace_dir(owner_id: int, agent_name: str, create: bool = True) -> Path:
    path = Path(settings.DATA_DIR) / "workspaces" / str(owner_id) / agent_name
    if create:  # not for a look that must write nothing (an import's dry run)
        path.mkdir(parents=True, exist_ok=True)
    return path
