"""What a turn changed in memory, told in the chat — "Remembered: allergic to
peanuts", with Undo — and undoing it.

The agent's tool result carries the change (`data["memory"]`, set by
agent.runtime from `noted`), so the chat draws the notice from the stored event,
live and after a reload alike (neotask_site/templates/sessions_app/_event.html). Undo of a
fact the turn created forgets it through the one deletion path
(memory.forgetting, which also redacts the call and this result); undo of an
update puts the value back from the history. A fact the agent forgot, or a
memory file it wrote, is told but has no Undo: forgetting erases the value
everywhere, the history included, and a file's history is cut at 10,000
characters, so neither can be put back faithfully.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import Http404

from core.history import Actor
from core.models import FORGOTTEN, Change
from core.ownership import Owner, get_owned_or_404
from memory import forgetting
from memory.models import Event, EventType, Fact

FACT_TOOLS = ("remember_fact",)
FILE_TOOLS = ("write_memory_file", "append_memory_file")
NOTED_TOOLS = (*FACT_TOOLS, "forget_fact", *FILE_TOOLS)  # the tools `noted` tells of

UNDONE_CREATED = "Undone: the fact is forgotten."
UNDONE_CHANGED = "Undone: the earlier value is back."
GONE = "Nothing to undo: the fact was deleted since."
MOVED_ON = "Not undone: the fact has changed since (see Facts)."
NO_EARLIER = "Not undone: its earlier value was forgotten."


def noted(owner: Owner, tool: str, call: Event, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """What the call `call` of `tool`, run with `arguments`, changed in memory, as
    the tool result keeps it for the chat's notice; None if nothing (a fact said
    again as it was, a tool that changes no memory)."""
    if tool in FACT_TOOLS:
        # The fact whose value this call set (memory.models.FactQuerySet.remember).
        fact = Fact.objects.owned_by(owner).filter(origin_event=call).first()
        if fact is None:
            return None
        change = (
            Change.objects.owned_by(owner)
            .filter(subject_kind=Change.Subject.FACT, subject_id=str(fact.pk))
            .order_by("-id")
            .first()
        )
        if change is None or change.action == Change.Action.DELETED:
            return None
        return {
            "kind": "fact",
            "fact": fact.pk,
            "change": change.pk,
            "action": change.action,
            "text": fact.value,
        }
    if tool == "forget_fact":
        return {"kind": "forgot", "text": f"{arguments['category']}/{arguments['key']}"}
    if tool in FILE_TOOLS:
        return {"kind": "file", "text": str(arguments["path"])}
    return None


def undo(owner: Owner, result_id: int) -> str:
    """Undo the memory change the owner's tool result `result_id` tells of; what
    happened, in words. Http404 unless it is the owner's, tells of a fact's change
    and that fact is the owner's."""
    result = get_owned_or_404(Event, owner, pk=result_id, event_type=EventType.TOOL_RESULT)
    memory = (result.data or {}).get("memory")
    if not isinstance(memory, dict) or memory.get("kind") != "fact":
        raise Http404("No change to undo")
    if memory.get("undone"):
        return UNDONE_CHANGED
    with transaction.atomic():
        fact = Fact.objects.owned_by(owner).select_for_update().filter(pk=memory["fact"]).first()
        if fact is None:  # someone else's (a forged id), or deleted since: alike
            raise Http404(GONE)
        if fact.value != memory["text"]:
            return MOVED_ON
        actor = Actor.user(owner)
        if memory["action"] == Change.Action.CREATED:
            forgetting.forget_facts(owner, Fact.objects.owned_by(owner).filter(pk=fact.pk), actor)
            return UNDONE_CREATED
        change = get_owned_or_404(Change, owner, pk=memory["change"])
        earlier = {
            name: value
            for name, value in (change.old_value or {}).items()
            if name in Fact.history_fields
        }
        if not earlier or FORGOTTEN in earlier.values():
            return NO_EARLIER
        for name, value in earlier.items():
            setattr(fact, name, value)
        fact.save_by(actor)
        result.data = {**result.data, "memory": {**memory, "undone": True}}
        result.save(update_fields=["data"])
    return UNDONE_CHANGED
