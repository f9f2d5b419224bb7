"""What memory search indexes for an event: its key, apart from what is shown.

An event is displayed as its `text`; it is found by its key (`Event.search_key`,
embedded and matched by words first) and by its context (`Event.search_context`,
matched by words with less weight):

- the key names the speaker when the event knows one (`data["speaker"]`: an
  imported group chat, the evaluation's named people), so that "what did Maya
  say about…" reaches Maya's turns;
- the context is the previous turn of the same session. In a conversation the
  question is often asked in one turn and answered in the next ("How old is she
  turning?" — "Six, on April 9th"): the answer alone shares no word with a later
  question about it. The previous turn is known when the event is written, so
  keys never wait for a later message.

`KEY_VERSION` names this recipe. Events keyed by an older one are re-keyed and
re-embedded by the background sweep (`memory.tasks.rekey_stale`); until then their
old key and vector serve, so no event is ever unsearchable. Change the version
whenever `key_for` or `context_for` would give different text.

How much each part is worth was measured by `memory_eval` on the project's own
dataset and on LoCoMo (docs/memory.md).
"""

from __future__ import annotations

from typing import Any

KEY_VERSION = 1
MAX_SPEAKER_CHARS = 100
MAX_CONTEXT_CHARS = 1000  # the previous turn's words; more would drown the event's own


def speaker_of(data: dict[str, Any] | None) -> str:
    """The named speaker of an event, if its data names one."""
    speaker = (data or {}).get("speaker")
    if not isinstance(speaker, str):
        return ""
    return " ".join(speaker.split())[:MAX_SPEAKER_CHARS]


def key_for(text: str, speaker: str = "") -> str:
    """What is embedded and matched first: the text, with its speaker when known."""
    return f"{speaker}: {text}" if speaker and text else text


def context_for(previous_text: str | None) -> str:
    """What is matched with less weight: the previous turn's words."""
    return " ".join((previous_text or "").split())[:MAX_CONTEXT_CHARS]
