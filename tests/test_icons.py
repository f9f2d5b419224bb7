"""Icons are inline SVG, not emoji: Chromium on a Debian desktop without an emoji font (the
default install) draws an emoji as an empty box, so a button whose only content is one says
nothing. The scan covers what the browser shows: templates, and the scripts that build HTML."""

from __future__ import annotations

import re
from pathlib import Path

from memory import recording
from sessions_app import chat

ROOT = Path(__file__).resolve().parent.parent

# The emoji blocks: pictographs, emoticons, transport, supplemental symbols (U+1F000-U+1FAFF),
# miscellaneous symbols and dingbats (U+2600-U+27BF), miscellaneous technical (watch, hourglass)
# and the stars and arrows of U+2B00-U+2BFF, plus VS16, which asks for any char's emoji form.
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2300-\u23ff\u2b00-\u2bff\ufe0f]")
# Plain typographic marks in those blocks that DejaVu Sans (Debian's default font) draws as
# text, next to a word ("✎ Edit", "✓ Works", "✗ Failed"): they are not emoji-only icons.
TYPOGRAPHIC = {"\u270e", "\u2713", "\u2717"}


def _shown_sources() -> list[Path]:
    templates, static = (
        ROOT / "neotask_site" / "templates",
        ROOT / "neotask_site" / "static" / "neotask",
    )
    return sorted(
        [
            *templates.rglob("*.html"),
            *templates.rglob("*.svg"),
            *static.glob("*.js"),
            *static.glob("*.css"),
        ]
    )


def test_no_template_or_script_uses_an_emoji_as_an_icon():
    assert len(_shown_sources()) > 50  # the scan reads the real folders
    found = [
        f"{path.relative_to(ROOT)}:{number}: {char!r} U+{ord(char):04X}"
        for path in _shown_sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for char in EMOJI.findall(line)
        if char not in TYPOGRAPHIC
    ]
    assert found == []


def test_the_scan_sees_an_emoji():
    # The scan is not vacuous: the emoji this replaced are in its ranges, the allowed marks not.
    assert EMOJI.findall("📌 🗑 ⭐ ☀") == ["📌", "🗑", "⭐", "☀"]
    assert not set(EMOJI.findall("✎ ✓ ✗ ← ▾ ◆ ↻")) - TYPOGRAPHIC


def test_message_controls_are_labelled_svg_icons(alice, alice_client):
    session = chat.start_chat(alice)
    recording.record(alice, str(session.pk), "user_message", {"content": "hello"})
    page = alice_client.get(f"/chat/{session.key}/").content.decode()
    pin = page[page.index('<button type="button" class="pin') :]
    pin = pin[: pin.index("</button>")]
    assert 'aria-label="Pin"' in pin and 'aria-pressed="false"' in pin
    assert '<svg class="icon"' in pin and 'aria-hidden="true"' in pin
    delete = page[page.index('<a class="delete-event') :]
    delete = delete[: delete.index("</a>")]
    assert 'aria-label="Delete"' in delete and '<svg class="icon"' in delete
