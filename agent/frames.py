"""The frames a chat sends to its clients (docs/api.md, "The websocket protocol"), defined once.

A turn emits these objects; the websocket sends `as_json()` of each, and the
API and the scheduler fold them into an `Outcome` (sessions_app.inputs) —
nobody builds or parses a frame dict by hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Frame:
    type: ClassVar[str]

    def as_json(self) -> dict[str, Any]:
        # Shallow (asdict deep-copies): a frame's values go out as they are.
        return {"type": self.type, **{f.name: getattr(self, f.name) for f in fields(self)}}


# Where a run sends its frames: to every tab of the chat, and into its Outcome.
Emit = Callable[[Frame], Awaitable[None]]


@dataclass(frozen=True)
class Delta(Frame):
    """Streamed answer text (several tokens when coalesced)."""

    type: ClassVar[str] = "delta"
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"type": "delta", "text": self.text}  # the most frequent frame, built directly


@dataclass(frozen=True)
class Status(Frame):
    """What a turn is doing while nothing streams: reading memory, the model reading
    its prompt, a tool running. The chat shows it in the answer's placeholder (and
    ticks the seconds) until the first delta; whoever shows no progress (the API,
    the OpenAI-compatible stream, the scheduler) ignores it."""

    type: ClassVar[str] = "status"
    stage: str  # memory | model | tool
    text: str
    tokens: int | None = None  # stage "model": the prompt's estimated size
    tool: str | None = None  # stage "tool": the tool's name

    @classmethod
    def memory(cls) -> Status:
        return cls("memory", "Reading memory…")

    @classmethod
    def model(cls, tokens: int) -> Status:
        return cls("model", f"The model is reading {tokens:,} tokens…", tokens=tokens)

    @classmethod
    def running(cls, tool: str) -> Status:
        return cls("tool", f"Running {tool}…", tool=tool)


@dataclass(frozen=True)
class EventFrame(Frame):
    """A stored event; the websocket adds `event.html`, its rendering in the chat page."""

    type: ClassVar[str] = "event"
    event: dict[str, Any]
    stored: Any = field(default=None, compare=False, repr=False)  # the Event, to render

    @classmethod
    def of(cls, event: Any) -> EventFrame:
        return cls(event.as_dict(), event)

    def as_json(self) -> dict[str, Any]:
        return {"type": self.type, "event": self.event}


@dataclass(frozen=True)
class ApprovalAsked(Frame):
    """The chat asks the user to decide on a stored agent.models.ApprovalRequest
    (the browser and the API know the frame by its type, "approval_request")."""

    type: ClassVar[str] = "approval_request"
    request_id: str
    command: str
    # The exact rule "Allow always" stores; None: the card offers only
    # "Allow once" and "Deny", and says why (`always_refused`).
    prefix: str | None = None
    always_refused: str = ""
    kind: str = "terminal"  # "mcp", "lasting": `command` is a tool and its arguments


@dataclass(frozen=True)
class ApprovalDecided(Frame):
    type: ClassVar[str] = "approval_decided"
    request_id: str
    decision: str


@dataclass(frozen=True)
class SessionChanged(Frame):
    """The chat continues in another session: a reset, a rollover or a compaction."""

    type: ClassVar[str] = "session"
    session_id: str
    reason: str


@dataclass(frozen=True)
class Meter(Frame):
    type: ClassVar[str] = "meter"
    meter: dict[str, Any]


@dataclass(frozen=True)
class Done(Frame):
    """The end of one input's run, whatever happened in it."""

    type: ClassVar[str] = "done"
    usage: dict[str, int]
    status: str  # completed | error | stopped | max_iterations
    meter: dict[str, Any] | None = None
    input_id: int | None = None  # the input it ends (set by the runner)


@dataclass(frozen=True)
class Error(Frame):
    type: ClassVar[str] = "error"
    message: str
    input_id: int | None = None  # the input whose run it belongs to; None: a reply to the sender

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.input_id is not None:
            data["input_id"] = self.input_id
        return data


@dataclass(frozen=True)
class Refused(Frame):
    """An input refused by a quota (sessions_app.quotas) and not stored: an error
    frame that says which `limit`, when to try again, and hands the sender's
    `text` back (the chat page puts it back into the message box)."""

    type: ClassVar[str] = "error"
    message: str
    limit: str
    retry_after: int
    text: str = ""


@dataclass(frozen=True)
class Notice(Frame):
    type: ClassVar[str] = "notice"
    text: str
    # A notice with structure (/help, /status): `text` is Markdown, this its safe HTML.
    html: str = ""

    def as_json(self) -> dict[str, Any]:
        laid_out = {"html": self.html} if self.html else {}
        return {"type": self.type, "text": self.text, **laid_out}


@dataclass(frozen=True)
class Queued(Frame):
    """An input waits for the turn before it; `Started` follows when it runs."""

    type: ClassVar[str] = "queued"
    input_id: int
    text: str


@dataclass(frozen=True)
class Started(Frame):
    type: ClassVar[str] = "started"
    input_id: int


@dataclass
class Outcome:
    """What one input's run produced, folded from its frames: the API's answer
    and the scheduler's report are both this."""

    session_id: str
    status: str = "completed"
    answer: str = ""
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    session_changes: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)

    def take(self, frame: Frame) -> None:
        if isinstance(frame, EventFrame):
            self.events.append(frame.event)
        elif isinstance(frame, SessionChanged):
            self.session_id = frame.session_id  # post the next message there
            self.session_changes.append({"session_id": frame.session_id, "reason": frame.reason})
        elif isinstance(frame, Error):
            self.warnings.append(frame.message)
        elif isinstance(frame, ApprovalAsked):
            self.approvals.append(asdict(frame))
        elif isinstance(frame, Done):
            self.status, self.usage = frame.status, frame.usage

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**data)
