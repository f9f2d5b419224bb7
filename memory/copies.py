"""Everything that still states what the user asks to forget: a fact, a memory
search hit or a chat message. Deleting the one thing leaves its copies (the
message that said it, later messages that repeat it, a summary that condensed
it, a line of a memory file), and the agent would still know it; the forget
dialog lists them (`copies_of`), each with a checkbox, and removes the chosen
ones (`forget_selected`) through memory.forgetting, the one deletion path.

Only the owner's rows and files are ever read (`owned_by`, the owner's
workspace), and what a form sends back is checked against the list made again
at that moment: a copy that is not in it (another user's, deleted meanwhile,
tampered with) refuses the whole request, and nothing is deleted.

A copy matches:
- by words: every word of the forgotten text (its words as memory search sees
  them, `fulltext.terms`, compared by their first STEM letters so that
  "allergic" meets "allergy"), or, for a long text, most of them (WORD_SHARE);
- by meaning: the cosine of its vector to the forgotten text's is at least
  SIMILAR (the embedding model's, the vector branch of memory search).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction

from core.history import Actor
from core.ownership import Owner
from memory import forgetting, fulltext
from memory.files import paths
from memory.forgetting import Forgotten
from memory.models import Event, EventType, Fact, MemoryFile
from memory.vector_index import in_database, index_for
from memory.workspace import DEFAULT_AGENT, workspace_dir

# Cosine of all-MiniLM-L6-v2 vectors (the default embedding model), measured on
# 10 pairs of paraphrases ("I am allergic to peanuts" / "Peanuts give me an
# allergic reaction", "city: Porto" / "I live in Porto", "I don't eat meat" / "I
# am a vegetarian"…): 0.63 to 0.89; the same 10 sentences against 10 unrelated ones
# ("What is for dinner?", "I like jazz music"…): at most 0.31 (mean 0.08, p95
# 0.19). 0.55 keeps every paraphrase with a margin and stays far from chance;
# what it wrongly offers, the user unticks.
SIMILAR = 0.55
CANDIDATES = 200  # per branch: more copies of one thing than a person would read
STEM = 5  # letters compared: "allergic"/"allergy", "peanut"/"peanuts"
WORD_SHARE = 0.6  # of a text of more than SHORT words, this share must be found
SHORT = 3
MAX_TEXT = 2000


class CopyError(LookupError):
    """The request names nothing of the owner's, or a copy that is not (or no
    longer) among what states it: nothing was deleted."""


@dataclass(frozen=True)
class Copy:
    """One thing that states it; `ref` is what the form sends back."""

    ref: str
    kind: str  # "fact", "event" or "line"
    label: str  # what it is, for the dialog
    text: str
    why: str  # how it was found


@dataclass
class Copies:
    """What a request to forget names (`subject`, e.g. "fact:12") and what states it."""

    subject: str
    text: str  # the forgotten text, as matched
    items: list[Copy] = field(default_factory=list)

    def refs(self) -> set[str]:
        return {item.ref for item in self.items}


def stems(text: str) -> set[str]:
    return {word[:STEM] for word in fulltext.terms(text[:MAX_TEXT])}


def says(wanted: set[str], text: str) -> bool:
    """Whether `text` has the words of `wanted` (all of a short text, most of a long one)."""
    if not wanted:
        return False
    found = len(wanted & stems(text))
    return found == len(wanted) if len(wanted) <= SHORT else found >= WORD_SHARE * len(wanted)


def fact_text(fact: Fact) -> str:
    return f"{fact.key.replace('_', ' ')}: {fact.value}"


LABELS = {
    EventType.USER_MESSAGE: "Your message",
    EventType.ASSISTANT_RESPONSE: "The agent's answer",
    EventType.SUMMARY: "Summary",
    EventType.COMPACTION: "Compaction summary",
}


def describe(event: Event) -> str:
    return LABELS.get(event.event_type) or event.get_event_type_display()  # type: ignore[call-overload]


def parse(subject: str) -> tuple[str, int]:
    kind, _, pk = subject.partition(":")
    if kind not in ("fact", "event") or not pk.isdigit():
        raise CopyError("Choose a fact or a message to forget.")
    return kind, int(pk)


def copies_of(owner: Owner, subject: str) -> Copies:
    """Everything of `owner`'s that states the fact ("fact:<id>") or the event
    ("event:<id>", a message or a memory search hit): the thing itself first.
    CopyError if it names nothing of the owner's."""
    kind, pk = parse(subject)
    events = Event.objects.owned_by(owner)
    facts = Fact.objects.owned_by(owner)
    items: dict[str, Copy] = {}
    chosen_facts: list[Fact] = []
    chosen_events: list[Event] = []  # (a fact's: where it was said)
    if kind == "fact":
        fact = facts.select_related("origin_event").filter(pk=pk).first()
        if fact is None:
            raise CopyError("No such fact: it may have been forgotten already.")
        text, agent = fact_text(fact), None
        words = fact.value if stems(fact.value) else text  # the value is what it says
        wanted = stems(words)
        chosen_facts.append(fact)
        add_fact(items, fact, "the fact")
        if (said := where_said(owner, fact)) is not None:
            chosen_events.append(said)
            add_event(items, said, "where it was said")
    else:
        event = events.filter(pk=pk).first()
        if event is None:
            raise CopyError("No such message: it may have been deleted already.")
        text, words, agent = event.text, event.text, event.agent
        wanted = stems(words)
        chosen_events.append(event)
        add_event(items, event, "what you chose")
    agent = agent or DEFAULT_AGENT
    # Facts the agent saved in the chosen message's turn (a fact's own origin
    # message may have told others too: those are not offered unless they say it).
    for event in chosen_events if kind == "event" else []:
        for fact in facts.filter(origin_event__in=turn_of(event)):
            add_fact(items, fact, "saved from it")
    for fact in facts.exclude(pk__in=[f.pk for f in chosen_facts]):
        if says(stems(fact.value), text):
            add_fact(items, fact, "its value is in it")
    # A fact is told to every agent, and a message may be repeated to another:
    # every agent's memories and files are searched, the subject's first.
    found: dict[int, str] = {}
    lines: list[Copy] = []
    for name in [agent, *sorted(agents_of(owner) - {agent})]:
        found |= by_words(owner, name, words, wanted) | by_meaning(owner, name, text)
        lines += file_lines(owner, name, wanted)
    for event in events.filter(pk__in=found, event_type__in=EventType.RECALLABLE).order_by("pk"):
        add_event(items, event, found[event.pk])
    for line in lines:
        items.setdefault(line.ref, line)
    return Copies(subject, text, list(items.values()))


def agents_of(owner: Owner) -> set[str]:
    """The agents with memories or memory files of the owner's."""
    events = Event.objects.owned_by(owner).values_list("agent", flat=True).distinct()
    files = MemoryFile.objects.owned_by(owner).values_list("agent", flat=True).distinct()
    return {*events.order_by(), *files.order_by()}


def add_fact(items: dict[str, Copy], fact: Fact, why: str) -> None:
    items.setdefault(
        f"fact:{fact.pk}", Copy(f"fact:{fact.pk}", "fact", "Fact", str(fact_text(fact)), why)
    )


def add_event(items: dict[str, Copy], event: Event, why: str) -> None:
    ref = f"event:{event.pk}"
    items.setdefault(ref, Copy(ref, "event", describe(event), event.text, why))


def where_said(owner: Owner, fact: Fact) -> Event | None:
    """The fact's origin message: the summary it came from, or the user's message
    of the turn whose tool call saved it (the call and its result are redacted by
    forget_facts)."""
    origin = fact.origin_event
    if origin is None or origin.owner_id != owner.pk:
        return None
    if origin.event_type in EventType.RECALLABLE:
        return origin
    return (
        Event.objects.owned_by(owner)
        .filter(session_id=origin.session_id, event_type=EventType.USER_MESSAGE, pk__lt=origin.pk)
        .order_by("-pk")
        .first()
    )


def turn_of(event: Event) -> list[int]:
    """The event and what followed it up to the next message of the user's (the
    tool calls that may have saved a fact from it)."""
    session = Event.objects.filter(owner_id=event.owner_id, session_id=event.session_id)
    later = session.filter(pk__gt=event.pk, event_type=EventType.USER_MESSAGE).order_by("pk")
    end = later.values_list("pk", flat=True).first()
    turn = session.filter(pk__gte=event.pk)
    if end is not None:
        turn = turn.filter(pk__lt=end)
    return list(turn.values_list("pk", flat=True))


def by_words(owner: Owner, agent: str, text: str, wanted: set[str]) -> dict[int, str]:
    """The owner's memories that have the words (the full-text index finds the
    candidates, `says` keeps those with enough of them)."""
    # As memory search does (fulltext.COMMON_SHARE): in a large memory the words
    # common to most of it are left out of the query; a copy has the rarer ones too.
    memories = None if in_database() else index_for(owner.pk, agent).count()
    found = fulltext.search(owner.pk, agent, text[:MAX_TEXT], CANDIDATES, memories=memories)
    ids = [pk for pk, _ in found]
    rows = Event.objects.owned_by(owner).filter(pk__in=ids).only("id", "text")
    return {event.pk: "same words" for event in rows if says(wanted, event.text)}


def by_meaning(owner: Owner, agent: str, text: str) -> dict[int, str]:
    """The owner's memories whose vector is at least SIMILAR to the text's."""
    from memory.embeddings import embed_text

    if not text.strip():  # (a tool call's event has no text: its arguments are its words)
        return {}
    vector = embed_text(text[:MAX_TEXT])
    if vector is None:
        return {}
    hits = index_for(owner.pk, agent).query(vector).top(CANDIDATES, min_score=SIMILAR)
    return {pk: f"same meaning ({score:.2f})" for pk, score in hits}


def line_ref(agent: str, path: str, number: int, line: str) -> str:
    """A line named by its number and a digest of its text, so that a line that
    changed meanwhile is not removed in its place."""
    return f"line:{agent}:{number}:{forgetting.line_digest(line)}:{path}"


def file_lines(owner: Owner, agent: str, wanted: set[str]) -> list[Copy]:
    """Lines of the agent's memory files (as indexed) that have the words."""
    workspace = workspace_dir(owner.pk, agent, create=False)
    found = []
    for path in (
        MemoryFile.objects.owned_by(owner)
        .filter(agent=agent, skip_reason="")
        .order_by("path")
        .values_list("path", flat=True)
    ):
        try:
            text, _ = paths.read_memory_file(workspace, path)
        except paths.MemoryPathError:  # gone or unreadable since it was indexed
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if says(wanted, line):
                ref = line_ref(agent, path, number, line)
                found.append(Copy(ref, "line", f"{path}, line {number}", line, "same words"))
    return found


def forget_selected(owner: Owner, subject: str, refs: Iterable[str], actor: Actor) -> Forgotten:
    """Forget the chosen copies of `subject`: all of them must be among what
    `copies_of` lists now (CopyError otherwise), and no message of a chat that is
    answering (forgetting.Busy); if either is raised, nothing is deleted."""
    chosen = set(refs)
    if not chosen:
        raise CopyError("Nothing was selected: tick what to forget.")
    offered = copies_of(owner, subject).refs()
    if not chosen <= offered:
        raise CopyError(
            "Some of the selected items are not among what states it (deleted meanwhile, "
            "or not yours): nothing was deleted. Open the dialog again."
        )
    facts = [int(ref[5:]) for ref in chosen if ref.startswith("fact:")]
    events = [int(ref[6:]) for ref in chosen if ref.startswith("event:")]
    lines: dict[tuple[str, str], dict[int, str]] = {}
    for ref in chosen:
        if ref.startswith("line:"):
            _, agent, number, digest, path = ref.split(":", 4)
            lines.setdefault((agent, path), {})[int(number)] = digest
    report = Forgotten()
    forgetting.check_not_busy(owner, list(Event.objects.owned_by(owner).filter(pk__in=events)))
    # Files first: a line changed since the check (paths.FileConflict) stops the
    # rest before any row goes.
    for (agent, path), numbers in sorted(lines.items()):
        report.lines += forgetting.forget_memory_lines(owner, agent, path, numbers, actor)
    with transaction.atomic():
        if facts:
            report.facts += forgetting.forget_facts(
                owner, Fact.objects.owned_by(owner).filter(pk__in=facts), actor
            ).facts
        left = list(
            Event.objects.owned_by(owner).filter(pk__in=events).values_list("pk", flat=True)
        )
        if left:  # (a fact's forgetting may have taken some)
            erased = forgetting.forget_events(owner, left, actor)
            for name, count in erased.as_dict().items():
                setattr(report, name, getattr(report, name) + count)
    return report
