"""The export archive's records, declared once (docs/data-export.md says each field):
`Record.of(row)` is the line the export writes, `Record.check(line)` the checked
line an import writes from. A reader ignores fields it does not know.

Checking words its refusals as the archive's reader sees them ("'key' must be a
non-empty string"); the types below say what each field may hold.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Self

from django.utils import timezone
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from agent.llm import Usage
from importers.text import cut, storable
from memory.models import EventType, Fact
from memory.workspace import is_agent_name
from scheduler.planning import MAX_NAME_CHARS, TaskError, check_name, check_prompt
from scheduler.schedule import ScheduleError, next_run
from sessions_app.keys import SessionKey, SessionKeyError
from sessions_app.models import Session

MAX_CONDENSED = 100_000  # sources of one summary
PROMOTED = ("tool_calls", "tool_call_id", "is_error", "usage")  # transcripts' own fields


class BadRecord(ValueError):
    pass


def bad(message: str) -> PydanticCustomError:
    """A field's problem: its name is put before `message`."""
    return PydanticCustomError("field", message)


def bad_record(message: str) -> PydanticCustomError:
    """A record's problem, worded whole."""
    return PydanticCustomError("record", message)


def wording(error: ErrorDetails) -> str:
    name = next((part for part in reversed(error["loc"]) if isinstance(part, str)), "record")
    if error["type"] == "record":
        return error["msg"]
    if error["type"] == "field":
        return f"{name!r} {error['msg']}"
    return f"{name!r}: {error['msg']}"


# The field types: each checks what the archive holds, and makes it storable.


def text_check(limit: int, *, empty: bool = False, strip: bool = False) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or (not empty and not value.strip()):
            raise bad(f"must be a{'' if empty else ' non-empty'} string")
        if len(value) > limit:
            raise bad(f"is longer than {limit} characters")
        value = storable(value)
        return value.strip() if strip else value

    return check


def Text(limit: int, *, empty: bool = False, strip: bool = False) -> BeforeValidator:
    return BeforeValidator(text_check(limit, empty=empty, strip=strip))


def OptionalText(limit: int) -> BeforeValidator:
    check = text_check(limit, empty=True)
    return BeforeValidator(lambda value: None if value is None else check(value))


def Number(low: float, high: float | None = None, *, whole: bool = False) -> BeforeValidator:
    def check(value: Any) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise bad("must be a number")
        if value < low or (high is not None and value > high):
            raise bad("is out of range")
        if whole and not isinstance(value, int):
            raise bad("must be a whole number")
        return value

    return BeforeValidator(check)


def check_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad("must be true or false")
    return value


def check_event_ids(value: Any) -> list[int] | None:
    """A list of archive event ids (a summary's sources); None when absent."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) > MAX_CONDENSED
        or not all(isinstance(item, int) and not isinstance(item, bool) for item in value)
    ):
        raise bad(f"must be a list of at most {MAX_CONDENSED} event ids")
    return value


def check_moment(value: Any) -> datetime | None:
    if value is None:
        return None  # refused by the type when the field is required
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise bad("must be a timestamp with its time zone")
    return parsed


def required_moment(value: Any) -> datetime:
    if (parsed := check_moment(value)) is None:
        raise bad("must be a timestamp with its time zone")
    return parsed


def iso(value: Any) -> Any:
    """A timestamp as Django's rows say it (+00:00, not Z)."""
    return value.isoformat() if isinstance(value, datetime) else value


def check_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad("must be an object")
    return value


AsIso = PlainSerializer(iso, when_used="json")
Flag = Annotated[bool, BeforeValidator(check_flag)]
Count = Annotated[int, Number(0, whole=True)]
Share = Annotated[float, Number(0.0, 1.0)]  # an importance, a confidence
Moment = Annotated[datetime | None, BeforeValidator(check_moment), AsIso]
RequiredMoment = Annotated[datetime, BeforeValidator(required_moment), AsIso]
Object = Annotated[dict[str, Any], BeforeValidator(check_object)]
EventIds = Annotated[list[int] | None, BeforeValidator(check_event_ids)]


class Record(BaseModel):
    """One kind of record: its fields, their types (checked on import), their order
    (as the export writes them)."""

    model_config = ConfigDict(validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def absent_as_null(cls, value: Any) -> Any:
        """A field left out is checked as null: refused in the same words as a wrong one."""
        if not isinstance(value, dict):
            return value
        return {
            name: None for name, field in cls.model_fields.items() if field.is_required()
        } | value

    @classmethod
    def check(cls, line: Any) -> Self:
        try:
            return cls.model_validate(line)
        except ValidationError as exc:
            raise BadRecord(wording(exc.errors()[0])) from None

    @classmethod
    def of(cls, row: Any, **fields: Any) -> dict[str, Any]:
        """The line for `row`: each field its attribute (or as given), unchecked."""
        for name in cls.model_fields:
            if name not in fields:
                fields[name] = getattr(row, name)
        record = cls.model_construct(**fields)
        return record.model_dump(mode="json", warnings=False)


class AgentRecord(Record):
    name: str  # checked whole below, in the words of a name
    system_prompt: Annotated[str, Text(100_000, empty=True)]
    created_at: Moment

    @model_validator(mode="before")
    @classmethod
    def an_object(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise bad_record("an agent must be an object")
        if not is_agent_name(value.get("name")):
            raise bad_record(f"{value.get('name')!r} is not an agent name")
        return value


class SessionRecord(Record):
    """A session file's first line: the session, then its events follow."""

    type: Any
    id: Annotated[str, Text(64)]
    key: Annotated[str, Text(255)]
    channel: Any
    chat: Any
    title: Annotated[str, Text(200, empty=True)]
    status: Any
    agent: Any
    tokens: Object
    compaction_count: Count
    continues_from: Annotated[str | None, OptionalText(64)]
    created_at: RequiredMoment
    last_activity_at: RequiredMoment

    @model_validator(mode="before")
    @classmethod
    def a_session(cls, value: Any) -> Any:
        if not isinstance(value, dict) or value.get("type") != "session":
            raise bad_record("the first line must be the session (type 'session')")
        return value

    @model_validator(mode="after")
    def consistent(self) -> Self:
        try:
            key = SessionKey.parse(self.key)
        except SessionKeyError as exc:
            raise bad_record(str(exc)) from None
        if not key.is_scheduled and self.agent != key.agent:
            raise bad_record("'agent' is not the agent of its key")
        if key.is_scheduled:
            try:
                agent = text_check(64)(self.agent)
            except PydanticCustomError as exc:
                raise bad_record(f"'agent' {exc.message()}") from None
            key = SessionKey.for_task(key.chat, agent=agent)
            if not is_agent_name(key.agent):
                raise bad_record("'agent' is not an agent name")
        if self.status not in Session.Status.values:
            raise bad_record(f"'status' must be one of {', '.join(Session.Status.values)}")
        self._key = key
        try:
            self._usage = Usage(**TokenCounts.model_validate(self.tokens).model_dump())
        except ValidationError as exc:
            raise bad_record(wording(exc.errors()[0])) from None
        return self

    _key: SessionKey = PrivateAttr()
    _usage: Usage = PrivateAttr()

    @property
    def session_key(self) -> SessionKey:
        """The key, a task's chat with the agent the line names."""
        return self._key

    @property
    def usage(self) -> Usage:
        return self._usage

    @classmethod
    def of(cls, row: Any, **fields: Any) -> dict[str, Any]:
        # Session.to_dict(): the fields the API and sessions.json say too
        return super().of(row, **{"type": "session", **row.to_dict(), **fields})


class TokenCounts(Record):
    input: Count
    output: Count
    cache_read: Count
    cache_write: Count


class EventRecord(Record):
    """An event's transcript line (sessions_app.transcripts.event_record writes it),
    and what only an archive carries: when consolidation took the event in, and a
    summary's sources."""

    id: Any
    type: Any
    timestamp: RequiredMoment
    importance: Share
    content: Any = ""
    tool_call: Object = Field(default_factory=dict)
    tool_name: Annotated[str | None, OptionalText(128)]
    data: Object = Field(default_factory=dict)
    consolidated_at: Moment
    condensed: EventIds

    @model_validator(mode="before")
    @classmethod
    def a_type(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if kind not in EventType.values:
            raise bad_record(f"'type' must be an event type, not {kind!r}")
        return value

    def fields(self, line: dict[str, Any]) -> dict[str, Any]:
        """What an event is drafted with (memory.recording.draft), and its archive id
        and sources: event_record reversed."""
        data = dict(self.data)
        if self.content != "":  # not always a string: kept as the event stored it
            data["content"] = self.content
        data.update(self.tool_call)
        data.update({name: line[name] for name in PROMOTED if name in line})
        data = storable(data)
        if (smaller := cut(data)) is not None:
            data = smaller
        return {
            "old_id": self.id if isinstance(self.id, int) else None,
            "event_type": self.type,
            "data": data,
            "text": data["content"] if isinstance(data.get("content"), str) else "",
            "created_at": self.timestamp,
            "importance": self.importance,
            "tool_name": self.tool_name,
            "consolidated_at": self.consolidated_at,
            "condensed": self.condensed,
        }


class FactRecord(Record):
    """A fact as the archive holds it: the one place its fields are listed."""

    category: Annotated[str, Text(100)]
    key: Annotated[str, Text(255)]
    value: Annotated[str, Text(Fact.MAX_VALUE, strip=True)]
    source: Any
    # Where its value came from: an event and session of this archive (their
    # archive ids), or just a label (an import, the admin).
    origin: Any
    origin_event_id: Any
    origin_session_id: Any
    origin_label: Any
    created_at: Moment
    updated_at: Moment

    @model_validator(mode="after")
    def known(self) -> Self:
        if self.source not in Fact.Source.values:
            raise bad_record(f"'source' must be one of {', '.join(Fact.Source.values)}")
        self.category, self.key = Fact.normalise(self.category), Fact.normalise(self.key)
        self.origin = self.origin if self.origin in Fact.Origin.values else ""
        if not isinstance(self.origin_event_id, int):
            self.origin_event_id = None
        return self


class MacroRecord(Record):
    trigger_tool: Annotated[str, Text(128, strip=True)]
    trigger_args_pattern: Annotated[str | None, OptionalText(10_000)]
    next_tool: Annotated[str, Text(128, strip=True)]
    next_args: Any
    confidence: Share
    used_count: Count
    is_disabled: Flag = False
    created_at: Moment

    def fields(self) -> dict[str, Any]:
        """What a Macro is created with."""
        return {
            "trigger_tool": self.trigger_tool,
            "trigger_args_pattern": self.trigger_args_pattern or None,
            "next_tool": self.next_tool,
            "next_args": storable(self.next_args or {}),
            "confidence": self.confidence,
            "used_count": self.used_count,
            "is_disabled": self.is_disabled,
        }


class TaskRecord(Record):
    id: Annotated[str, Text(64)]
    name: Annotated[str, Text(MAX_NAME_CHARS)]
    agent: Annotated[str | None, OptionalText(64)]
    cron_expr: Annotated[str, Text(100)]
    original_schedule: Annotated[str, Text(500, empty=True)]
    prompt: Annotated[str, Text(100_000)]
    source: Any
    time_zone: Annotated[str, Text(64)]
    is_oneshot: Flag = False
    is_paused: Flag = False
    is_trusted: Flag = False
    next_run_at: RequiredMoment
    last_run_at: Moment
    created_at: Moment

    @model_validator(mode="after")
    def runnable(self) -> Self:
        try:
            zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise bad_record(f"'time_zone' {self.time_zone!r} is not a time zone") from None
        self.cron_expr = " ".join(self.cron_expr.split())
        try:
            self.name = check_name(self.name)
            self.prompt = check_prompt(self.prompt)
            next_run(self.cron_expr, timezone.now(), self.time_zone)
        except (TaskError, ScheduleError) as exc:
            raise bad_record(str(exc)) from None
        if self.agent is not None and not is_agent_name(self.agent):
            raise bad_record("'agent' is not an agent name")
        self.original_schedule = self.original_schedule or self.cron_expr
        return self

    @classmethod
    def of(cls, row: Any, **fields: Any) -> dict[str, Any]:
        agent = row.agent.name if row.agent else None
        return super().of(row, id=str(row.pk), agent=agent, **fields)


class RuleRecord(Record):
    prefix: Annotated[str, Text(500, strip=True)]
    active: Flag = False
    created_at: Moment
