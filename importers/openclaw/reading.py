"""Reading an OpenClaw agent folder: what it holds, the sessions it names, and
each transcript entry as the events it becomes (nothing here writes)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from agent.llm import Usage
from importers.report import ImportRefused, ImportReport
from memory.files.paths import MEMORY_DIR, MEMORY_FILE
from memory.models import EventType

INDEX_NAME = "sessions.json"
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
SKIP_CHUNK = 64 * 1024  # how much of an over-long line is read at a time to pass over it

SUMMARY_TYPES = {"compaction", "branch_summary"}
# OpenClaw's bookkeeping (settings, labels, extensions' own entries): not conversation.
BOOKKEEPING_TYPES = {
    "model_change",
    "thinking_level_change",
    "custom",
    "custom_message",
    "label",
    "leaf",
    "session_info",
}
# OpenClaw's own name for a tool's result; its other roles are the chat's.
ROLE_ALIASES = {"toolResult": "tool"}
TOOL_CALL_BLOCKS = {"toolCall", "tool_use", "toolUse"}
UNSAFE_ESCAPE = re.compile(rb"\\u(0000|[dD][89a-fA-F])")

SESSIONS = "sessions"  # the report's kind


# The folder


@dataclass
class Folder:
    """What an OpenClaw agent folder holds; `locate` refuses a folder with nothing to import."""

    root: Path
    sessions_dir: Path | None
    transcripts: list[Path]
    memory_source: Path | None
    transcript_bytes: int  # the total of the import's progress
    notes: list[str] = field(default_factory=list)

    @classmethod
    def locate(cls, path: str | Path) -> Folder:
        root = Path(path).expanduser()
        if not root.is_dir():
            raise ImportRefused(f"{path} is not a directory.")
        root = root.resolve()
        sessions_dir = next(
            (
                candidate
                for candidate in (root / "sessions", root)
                if candidate.is_dir()
                and ((candidate / INDEX_NAME).is_file() or any(candidate.glob("*.jsonl")))
            ),
            None,
        )
        transcripts = sorted(sessions_dir.glob("*.jsonl")) if sessions_dir else []
        notes = []
        if (root / "workspace").is_symlink():
            notes.append("workspace/ is a symlink: not followed, its memory files not imported.")
        memory_source = next(
            (
                candidate
                for candidate in (root / "workspace", root)
                if candidate.is_dir()
                and not candidate.is_symlink()
                and any(
                    (candidate / name).exists() or (candidate / name).is_symlink()
                    for name in (MEMORY_FILE, MEMORY_DIR)
                )
            ),
            None,
        )
        if sessions_dir is None and memory_source is None:
            raise ImportRefused(
                f"{path} is not an OpenClaw agent folder: it has no sessions/{INDEX_NAME}, "
                "no transcripts (*.jsonl) and no MEMORY.md or memory/."
            )
        size = sum(p.stat().st_size for p in transcripts if p.is_file() and not p.is_symlink())
        return cls(root, sessions_dir, transcripts, memory_source, size, notes)


@dataclass
class Source:
    """One OpenClaw session to import."""

    session_id: str
    key: str | None  # None: a transcript sessions.json does not name
    entry: dict[str, Any]
    transcript: Path


def read_index(folder: Folder, report: ImportReport) -> dict[str, Any]:
    index_path = folder.sessions_dir / INDEX_NAME if folder.sessions_dir else None
    if index_path is None or not index_path.is_file():
        if folder.transcripts:
            report.note(f"No {INDEX_NAME}: every transcript is imported under an import key.")
        return {}
    if index_path.stat().st_size > MAX_INDEX_BYTES:
        report.note(f"{INDEX_NAME} is larger than {MAX_INDEX_BYTES} bytes and was not read.")
        return {}
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        report.note(f"{INDEX_NAME} is not valid JSON ({exc}); transcripts imported without keys.")
        return {}
    if not isinstance(index, dict):
        report.note(f"{INDEX_NAME} is not a JSON object; transcripts imported without keys.")
        return {}
    return index


def find_sources(folder: Folder, report: ImportReport) -> list[Source]:
    """Sessions named by sessions.json first (oldest first), then the other transcripts."""
    index = read_index(folder, report)
    by_file = {path.name: path for path in folder.transcripts}
    sources: list[Source] = []
    claimed: set[str] = set()
    entries = [(key, entry) for key, entry in index.items() if isinstance(entry, dict)]
    if malformed := len(index) - len(entries):
        report.saw(SESSIONS, malformed)
        report.skip(SESSIONS, "sessions.json entry is not an object", malformed)
    entries.sort(key=lambda item: (number(item[1].get("updatedAt")) or 0, item[0]))
    for key, entry in entries:
        session_id = entry.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            report.saw(SESSIONS)
            report.skip(SESSIONS, "sessions.json entry without a sessionId")
            continue
        if session_id in claimed:
            report.note(f"{key} names session {session_id} again; imported once.")
            continue
        claimed.add(session_id)
        names = [f"{session_id}.jsonl"]
        if isinstance(entry.get("sessionFile"), str):
            # Absolute paths point into the machine the folder came from: the name is enough.
            names.append(Path(entry["sessionFile"]).name)
        transcript = next((by_file[name] for name in names if name in by_file), None)
        if transcript is None:
            report.saw(SESSIONS)
            report.skip(SESSIONS, "transcript missing")
            report.note(f"{key}: no transcript {session_id}.jsonl.")
            continue
        claimed.add(transcript.name)
        sources.append(Source(session_id, key, entry, transcript))
    for path in folder.transcripts:
        if path.name not in claimed and path.stem not in claimed:
            sources.append(Source(path.stem, None, {}, path))
    return sources


# Entries


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 string, or an epoch in milliseconds (OpenClaw) or seconds."""
    try:
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        if (seconds := number(value)) is not None:
            return datetime.fromtimestamp(seconds / 1000 if seconds > 1e11 else seconds, UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def usage_of(raw: Any) -> Usage | None:
    """OpenClaw's usage ({input, output, cacheRead, cacheWrite}) or a provider's own."""
    if not isinstance(raw, dict):
        return None

    def count(*names: str) -> int:
        for name in names:
            value = raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return 0

    usage = Usage(
        input=count("input", "inputTokens", "input_tokens", "prompt_tokens"),
        output=count("output", "outputTokens", "output_tokens", "completion_tokens"),
        cache_read=count("cacheRead", "cache_read", "cache_read_input_tokens"),
        cache_write=count("cacheWrite", "cache_write", "cache_creation_input_tokens"),
    )
    return usage if usage != Usage() else None


@dataclass
class Parsed:
    """What one transcript entry becomes: events (type, data, tool name), in order."""

    events: list[tuple[str, dict[str, Any], str | None]]
    usage: Usage | None = None
    parts: int = 0  # content blocks kept
    dropped: list[str] = field(default_factory=list)  # why the others were not


def text_of(content: Any, parsed: Parsed, calls: list[dict[str, Any]] | None = None) -> str:
    """The text of a message's content (a string or a list of blocks); tool-call blocks go
    to `calls` when given, anything that is not text is counted in `parsed`."""
    if isinstance(content, str):
        parsed.parts += 1
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, dict):
            parsed.dropped.append(f"unknown content block {kind}")
            continue
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "image":
            texts.append("[image]")
        elif kind in TOOL_CALL_BLOCKS and calls is not None:
            calls.append(block)
        elif kind in ("thinking", "redacted_thinking"):
            parsed.dropped.append("thinking (not kept)")
            continue
        else:
            parsed.dropped.append(f"unknown content block {str(kind)[:40]}")
            continue
        parsed.parts += 1
    return "\n".join(texts)


def tool_call_event(call: dict[str, Any], position: int) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    name = call.get("name") or function.get("name") or "unknown"
    arguments = call.get("arguments", call.get("input", function.get("arguments", {})))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": str(call.get("id") or f"call_{position}"),
        "name": str(name),
        "arguments": arguments,
    }


def parse_message(message: dict[str, Any]) -> Parsed | str:
    role = message.get("role")
    event_type = EventType.of_role(ROLE_ALIASES.get(role, role)) if isinstance(role, str) else None
    if event_type is None:
        return f"unknown message role {str(role)[:40]}"
    parsed = Parsed([])
    content = message.get("content")
    if event_type == EventType.ASSISTANT_RESPONSE:
        blocks: list[dict[str, Any]] = []
        text = text_of(content, parsed, blocks)
        openai_calls = message.get("tool_calls")
        if isinstance(openai_calls, list):
            blocks += [call for call in openai_calls if isinstance(call, dict)]
        calls = [tool_call_event(call, n) for n, call in enumerate(blocks, start=1)]
        parsed.usage = usage_of(message.get("usage"))
        data: dict[str, Any] = {
            "content": text,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in calls
            ],
            "usage": (parsed.usage or Usage()).as_dict(),
        }
        stop = message.get("stopReason") or message.get("finish_reason")
        if isinstance(stop, str):
            data["finish_reason"] = stop
        if stop in ("error", "aborted"):
            data.update(interrupted=True, reason=stop)
        if isinstance(message.get("model"), str):
            data["model"] = message["model"]
        parsed.events.append((event_type, data, None))
        parsed.events += [(EventType.TOOL_CALL, call, call["name"]) for call in calls]
        if not text and not calls and not data.get("interrupted"):
            return "empty message" if not parsed.dropped else "nothing but thinking"
        return parsed
    text = text_of(content, parsed)
    if event_type == EventType.TOOL_RESULT:
        name = str(message.get("toolName") or message.get("name") or "unknown")
        data = {
            "tool_call_id": str(message.get("toolCallId") or message.get("tool_call_id") or ""),
            "name": name,
            "content": text,
            "is_error": bool(message.get("isError") or message.get("is_error")),
        }
        parsed.events.append((event_type, data, name))
        return parsed
    if not text.strip():
        return "empty message"
    parsed.events.append((event_type, {"content": text}, None))
    return parsed


def parse_entry(entry: dict[str, Any]) -> Parsed | str:
    """The events of one transcript entry, or why it gives none."""
    kind = entry.get("type")
    if kind == "message" and isinstance(entry.get("message"), dict):
        return parse_message(entry["message"])
    if kind in (None, "message") and "role" in entry:  # the older, flat form
        return parse_message(entry)
    if kind in SUMMARY_TYPES:
        summary = entry.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            return f"{kind} without a summary"
        data = {"content": summary, "source": f"openclaw {kind}"}
        if number(entry.get("tokensBefore")) is not None:
            data["tokens_before"] = entry["tokensBefore"]
        return Parsed([(EventType.SUMMARY, data, None)], parts=1)
    if kind in BOOKKEEPING_TYPES:
        return f"{kind} (not conversation)"
    return f"unknown entry type {str(kind)[:40]}"


def entry_time(entry: dict[str, Any]) -> datetime | None:
    message = entry.get("message")
    if not isinstance(message, dict):
        message = {}
    return parse_time(entry.get("timestamp")) or parse_time(message.get("timestamp"))


def read_lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes | None, int]]:
    """(line number, line, bytes read) for each line; the line is None when it is longer
    than MAX_LINE_BYTES, which is passed over without being held in memory."""
    line_number = 0
    while line := handle.readline(MAX_LINE_BYTES + 1):
        line_number += 1
        size = len(line)
        if size > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while rest := handle.readline(SKIP_CHUNK):
                size += len(rest)
                if rest.endswith(b"\n"):
                    break
            yield line_number, None, size
        else:
            yield line_number, line, size
