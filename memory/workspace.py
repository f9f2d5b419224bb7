"""Each agent's workspace: a directory under the data dir, per owner and agent."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def workspace_dir(owner_id: int, agent_name: str, create: bool = True) -> Path:
    path = Path(settings.DATA_DIR) / "workspaces" / str(owner_id) / agent_name
    if create:  # not for a look that must write nothing (an import's dry run)
        path.mkdir(parents=True, exist_ok=True)
    return path
