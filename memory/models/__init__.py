"""memory's models, one module per concept (Django finds them here)."""

from memory.models.event_log import (
    PINNED_IMPORTANCE,
    RECALLED,
    UNKNOWN,
    UNRECALLED_IMPORTANCE,
    Event,
    EventType,
    ForgottenEvent,
    Unknown,
    default_importance,
    is_recalled,
    transcript,
)
from memory.models.file_chunks import MemoryChunk, MemoryFile
from memory.models.knowledge import Fact, FactQuerySet, Macro

__all__ = [
    "PINNED_IMPORTANCE",
    "RECALLED",
    "UNKNOWN",
    "UNRECALLED_IMPORTANCE",
    "Event",
    "EventType",
    "Fact",
    "FactQuerySet",
    "ForgottenEvent",
    "Macro",
    "MemoryChunk",
    "MemoryFile",
    "Unknown",
    "default_importance",
    "is_recalled",
    "transcript",
]
