"""What a person sees of memory: the recall panel and memory search name the chat a
memory was said in and its day, link to it, and fold ids and raw scores under
"details"; memory search leaves out what does not bear on the query. With the
real embedding model (embed_missing, embed_text), as the app runs it."""

from __future__ import annotations

import re

from django.urls import reverse
from django.utils import timezone

from memory import recording
from memory.embeddings import embed_text
from memory.files.indexing import index_path
from memory.files.paths import write_memory_file
from memory.recall import record_recall
from memory.search import search_memory
from memory.tasks import embed_missing
from memory.workspace import workspace_dir
from sessions_app import broadcast, chat

DETAILS = re.compile(r'<details class="details"><summary>details</summary>(.*?)</details>', re.S)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SCORE = re.compile(r"\b[01]\.\d\d\b")


def visible(html: str) -> str:
    """The page without what the "details" toggles fold."""
    return DETAILS.sub("", html)


def said_in_chat(owner, title: str, text: str):
    session = chat.start_chat(owner)
    session.title = title
    session.save(update_fields=["title"])
    return recording.record(owner, str(session.pk), "user_message", {"content": text})


def day(event) -> str:
    return f"{timezone.localtime(event.created_at):%-d %b %Y}"


def test_the_recall_panel_names_the_chat_and_day_and_folds_ids_and_scores(alice, alice_client):
    said = said_in_chat(alice, "Dogs", "My dog Biscuit is a golden retriever")
    write_memory_file(workspace_dir(alice.pk, "main"), "MEMORY.md", "# Pets\nBiscuit eats lamb.")
    index_path(alice, "main", "MEMORY.md")
    embed_missing()
    session = chat.start_chat(alice)
    question = "Tell me about my dog Biscuit"
    recording.record(alice, str(session.pk), "user_message", {"content": question})
    recall = record_recall(alice, "main", str(session.pk), question, embed_text(question))
    assert recall is not None

    live = broadcast.render_event(recall)  # what the chat's tabs are sent, no query
    page = alice_client.get(f"/chat/{session.key}/").content.decode()
    for html in (live, page):
        panel = html[html.index('<details class="tool recall">') :]
        panel = panel[: panel.index("</ul></details>")]
        assert f'<a href="/events/{said.pk}/">from “Dogs”, {day(said)}</a>' in panel
        file_url = f"{reverse('memory-file')}?agent=main&amp;path=MEMORY.md#L1"
        assert f'<a href="{file_url}">from MEMORY.md, Pets</a>' in panel
        shown = visible(panel)
        assert not UUID.search(shown) and not SCORE.search(shown), shown
        folded = DETAILS.findall(panel)
        assert f"session {said.session_id}, event {said.pk} · score 0." in folded[0] + folded[1]
        assert any(f.startswith("MEMORY.md:1-2 · score 0.") for f in folded)


def test_memory_search_names_the_chat_and_folds_ids_and_scores(alice, alice_client):
    said = said_in_chat(alice, "Dogs", "My dog Biscuit is a golden retriever")
    embed_missing()
    page = alice_client.get(reverse("memory-search"), {"q": "golden retriever"}).content.decode()
    results = page[page.index('<ol class="results">') :]

    assert f'<a href="/events/{said.pk}/">from “Dogs”, {day(said)}</a>' in results
    assert not UUID.search(visible(results)) and not SCORE.search(visible(results))
    [folded] = DETAILS.findall(results)
    assert re.search(r"vector 0\.\d\d, lexical \d+\.\d\d · fused \d\.\d\d", folded), folded
    assert f"session {said.session_id}, event {said.pk}" in folded


DOGS = [
    "My dog Biscuit is a golden retriever",
    "Biscuit the dog chewed my running shoes again",
    "The vet says our dog needs a lighter diet",
]
UNRELATED = [
    "The quarterly tax return is due on Friday",
    "Our router keeps dropping the wifi connection",
    "I booked the flight to Lisbon for June 3rd",
    "The invoice for the kitchen tiles came in at 840 euros",
    "Remind me to renew the car insurance in March",
    "The meeting with the accountant moved to Tuesday",
    "Postgres vacuum settings need tuning on the staging server",
    "Pick up the dry cleaning before six",
    "Grandma's recipe uses two cups of flour and a pinch of salt",
    "The train to Porto leaves at 7:40 from platform 3",
]


def test_memory_search_leaves_out_what_does_not_bear_on_the_query(alice, alice_client):
    for n, text in enumerate(DOGS + UNRELATED):
        said_in_chat(alice, f"Chat {n}", text)
    embed_missing()
    # Without the cut-off the search ranks everything it has for one word.
    assert len(search_memory(alice, "dog", k=20)) == len(DOGS + UNRELATED)

    page = alice_client.get(reverse("memory-search"), {"q": "dog"}).content.decode()
    results = page[page.index('<ol class="results">') :]
    for text in DOGS:
        assert text in results
    for text in UNRELATED:
        assert text not in results
    assert f"{len(DOGS)} results for “dog”" in page
