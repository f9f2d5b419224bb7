"""Files tests write and compare: a file under a folder, a config.toml, and what
a folder holds."""

from __future__ import annotations

import hashlib
from pathlib import Path


def write(root: Path, path: str, content: str | bytes) -> Path:
    """`content` in the file `path` under `root`, its folders made."""
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        full.write_bytes(content)
    else:
        full.write_text(content, encoding="utf-8")
    return full


def write_config(folder: Path, content: str | bytes) -> Path:
    """`content` as the config.toml in `folder`."""
    return write(folder, "config.toml", content)


def file_hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (not links) with the sha256 of its content: what
    "nothing written" means."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }
