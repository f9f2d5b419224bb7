"""The forget dialog: before anything is deleted it lists everything of the
user's that still states a fact, a memory search hit or a message (the fact,
where it was said, messages and summaries with its words or its meaning, lines
of memory files), and forgets the ticked ones through the one forgetting path.
Nothing of another user's is ever listed or deleted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.history import Actor
from memory import recording
from memory.copies import SIMILAR, CopyError, copies_of, forget_selected
from memory.embeddings import embed_text
from memory.files.indexing import index_path
from memory.files.paths import FileConflict, read_memory_file
from memory.models import Event, EventType, Fact
from memory.search import search_memory
from memory.workspace import workspace_dir
from sessions_app.chat import start_chat
from sessions_app.models import ChatClaim, Session
from tests.support.files import write
from tests.support.records import fact_saved_in

HTMX = {"HTTP_HX_REQUEST": "true"}
SAID = "I am allergic to peanuts, keep that in mind."
PARAPHRASE = "Peanuts give me an allergic reaction."
OTHER = "What is for dinner tonight?"


def say(owner, session, text, kind=EventType.USER_MESSAGE, **data):
    return recording.record(
        owner, str(session.pk), kind, {"content": text, **data}, vector=embed_text(text)
    )


def stated(owner):
    """A chat where the user says it, the agent saves it as a fact, and says it again
    in other words later; and one unrelated message."""
    chat = start_chat(owner)
    said = say(owner, chat, SAID)
    call = recording.record(
        owner,
        str(chat.pk),
        EventType.TOOL_CALL,
        {"id": "c1", "name": "remember_fact", "arguments": {"value": "peanuts"}},
        embed=False,
    )
    fact = fact_saved_in(owner, call, "health", "allergy", "peanuts")
    later = start_chat(owner)
    again = say(owner, later, PARAPHRASE)
    other = say(owner, later, OTHER)
    return fact, said, again, other


def refs(found):
    return {item.ref for item in found.items}


def test_a_fact_lists_itself_where_it_was_said_its_repetitions_and_file_lines(alice):
    fact, said, again, other = stated(alice)
    workspace = workspace_dir(alice.pk, "main")
    write(workspace, "MEMORY.md", "# About me\n- Allergic to peanuts\n- Likes jazz\n")
    index_path(alice, "main", "MEMORY.md")

    found = copies_of(alice, f"fact:{fact.pk}")

    listed = refs(found)
    assert found.items[0].ref == f"fact:{fact.pk}"
    assert {f"event:{said.pk}", f"event:{again.pk}"} <= listed  # by words, by meaning
    assert f"event:{other.pk}" not in listed
    lines = [item for item in found.items if item.kind == "line"]
    assert [(item.label, item.text) for item in lines] == [
        ("MEMORY.md, line 2", "- Allergic to peanuts")
    ]


def test_a_message_lists_the_fact_saved_from_it_and_a_paraphrase(alice):
    fact, said, again, other = stated(alice)
    found = copies_of(alice, f"event:{said.pk}")
    assert found.items[0].ref == f"event:{said.pk}"
    assert {f"fact:{fact.pk}", f"event:{again.pk}"} <= refs(found)
    assert f"event:{other.pk}" not in refs(found)
    why = {item.ref: item.why for item in found.items}
    assert why[f"event:{again.pk}"].startswith("same meaning")


def test_a_summary_that_repeats_it_is_listed_and_forgotten(alice):
    fact, _said, *_ = stated(alice)
    chat = start_chat(alice)
    summary = say(alice, chat, "The user has a peanut allergy.", EventType.SUMMARY)

    found = copies_of(alice, f"fact:{fact.pk}")
    assert f"event:{summary.pk}" in refs(found)
    forget_selected(alice, f"fact:{fact.pk}", refs(found), Actor.user(alice))
    assert not Event.objects.filter(pk=summary.pk).exists()


def test_a_file_line_changed_since_it_was_offered_is_not_removed(alice):
    fact, *_ = stated(alice)
    workspace = workspace_dir(alice.pk, "main")
    write(workspace, "MEMORY.md", "- Allergic to peanuts\n")
    index_path(alice, "main", "MEMORY.md")
    offered = refs(copies_of(alice, f"fact:{fact.pk}"))
    write(workspace, "MEMORY.md", "- Allergic to peanuts and cashews\n")

    with pytest.raises(CopyError):
        forget_selected(alice, f"fact:{fact.pk}", offered, Actor.user(alice))
    assert read_memory_file(workspace, "MEMORY.md")[0] == "- Allergic to peanuts and cashews\n"
    assert Fact.objects.filter(pk=fact.pk).exists()


def test_nothing_is_forgotten_from_a_chat_that_is_answering(alice_client, alice):
    fact, said, *_ = stated(alice)
    chat = Session.objects.get(pk=said.session_id)
    ChatClaim.objects.create(
        owner=alice, key=chat.key, token="t", lease_until=timezone.now() + timedelta(seconds=20)
    )
    data = {"subject": f"fact:{fact.pk}", "copy": [f"fact:{fact.pk}", f"event:{said.pk}"]}
    response = alice_client.post(reverse("forget"), data)
    assert response.status_code == 400 and "answering" in response.content.decode()
    assert Fact.objects.filter(pk=fact.pk).exists() and Event.objects.filter(pk=said.pk).exists()


def test_a_fact_does_not_offer_another_fact_saved_in_the_same_turn(alice):
    fact, said, *_ = stated(alice)
    city = fact_saved_in(alice, fact.origin_event, "home", "city", "Porto")
    assert f"fact:{city.pk}" not in refs(copies_of(alice, f"fact:{fact.pk}"))
    assert f"fact:{city.pk}" in refs(copies_of(alice, f"event:{said.pk}"))


def test_another_agents_memories_and_files_are_searched_too(alice):
    fact, *_ = stated(alice)
    chat = start_chat(alice)
    elsewhere = recording.record(
        alice,
        str(chat.pk),
        EventType.USER_MESSAGE,
        {"content": SAID},
        agent="cook",
        vector=embed_text(SAID),
    )
    write(workspace_dir(alice.pk, "cook"), "MEMORY.md", "- No peanuts in any dish\n")
    index_path(alice, "cook", "MEMORY.md")
    found = refs(copies_of(alice, f"fact:{fact.pk}"))
    assert f"event:{elsewhere.pk}" in found
    assert any(ref.startswith("line:cook:1:") for ref in found)


def test_a_file_changed_while_forgetting_stops_before_any_row_goes(
    alice_client, alice, monkeypatch
):
    fact, said, *_ = stated(alice)
    workspace = workspace_dir(alice.pk, "main")
    write(workspace, "MEMORY.md", "- Allergic to peanuts\n")
    index_path(alice, "main", "MEMORY.md")
    offered = refs(copies_of(alice, f"fact:{fact.pk}"))

    def changed_meanwhile(*args, **kwargs):
        raise FileConflict("- Allergic to peanuts, edited\n", "x")

    monkeypatch.setattr("memory.forgetting.forget_memory_lines", changed_meanwhile)
    data = {"subject": f"fact:{fact.pk}", "copy": sorted(offered)}
    response = alice_client.post(reverse("forget"), data)
    assert response.status_code == 400 and "changed meanwhile" in response.content.decode()
    assert Fact.objects.filter(pk=fact.pk).exists() and Event.objects.filter(pk=said.pk).exists()


def test_the_threshold_parts_paraphrases_from_unrelated_sentences(db):
    def cosine(a, b):
        return float(embed_text(a) @ embed_text(b))

    assert cosine(SAID, PARAPHRASE) >= SIMILAR
    assert cosine(SAID, OTHER) < SIMILAR


def test_forgetting_the_selection_removes_every_copy_and_search_finds_none(alice):
    fact, said, again, other = stated(alice)
    workspace = workspace_dir(alice.pk, "main")
    write(workspace, "MEMORY.md", "- Allergic to peanuts\n- Likes jazz\n")
    index_path(alice, "main", "MEMORY.md")
    found = copies_of(alice, f"fact:{fact.pk}")

    report = forget_selected(alice, f"fact:{fact.pk}", refs(found), Actor.user(alice))

    assert report.facts == 1 and report.lines == 1 and report.events >= 2
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert list(Event.objects.filter(pk__in=[said.pk, again.pk])) == []
    assert Event.objects.filter(pk=other.pk).exists()
    assert read_memory_file(workspace, "MEMORY.md")[0] == "- Likes jazz\n"
    for query in ("peanuts", "allergic to peanuts", "a nut allergy"):
        texts = [getattr(hit, "text", "") or hit.event.text for hit in search_memory(alice, query)]
        assert not any("peanut" in text.lower() for text in texts), (query, texts)


def test_unticked_copies_stay(alice):
    fact, said, again, _other = stated(alice)
    forget_selected(alice, f"fact:{fact.pk}", [f"fact:{fact.pk}"], Actor.user(alice))
    assert Event.objects.filter(pk__in=[said.pk, again.pk]).count() == 2


def test_another_users_things_are_neither_listed_nor_forgotten(alice, bob):
    fact, _said, _again, _other = stated(alice)
    bob_chat = start_chat(bob)
    bobs = say(bob, bob_chat, SAID)

    assert f"event:{bobs.pk}" not in refs(copies_of(alice, f"fact:{fact.pk}"))
    with pytest.raises(CopyError):
        copies_of(bob, f"fact:{fact.pk}")
    with pytest.raises(CopyError):  # bob's message smuggled into alice's selection
        forget_selected(
            alice, f"fact:{fact.pk}", [f"fact:{fact.pk}", f"event:{bobs.pk}"], Actor.user(alice)
        )
    assert Fact.objects.filter(pk=fact.pk).exists()  # nothing at all was deleted
    assert Event.objects.filter(pk=bobs.pk).exists()


def test_the_dialog_is_shown_before_anything_is_deleted(alice_client, alice):
    fact, said, _again, _other = stated(alice)
    response = alice_client.get(reverse("forget"), {"subject": f"fact:{fact.pk}"}, **HTMX)
    page = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in page  # the dialog alone, for htmx
    assert page.count('type="checkbox"') == page.count("checked>") >= 3
    assert f'value="event:{said.pk}"' in page and "Forget selected" in page
    assert Fact.objects.filter(pk=fact.pk).exists()


def test_the_facts_page_and_search_results_open_the_dialog(alice_client, alice):
    fact, said, _again, _other = stated(alice)
    facts = alice_client.get(reverse("fact-list")).content.decode()
    assert f"?subject=fact:{fact.pk}" in facts
    search = alice_client.get(reverse("memory-search"), {"q": "peanuts"}).content.decode()
    assert f"?subject=event:{said.pk}" in search


def test_forget_selected_deletes_the_ticked_and_goes_back(alice_client, alice):
    fact, said, again, _other = stated(alice)
    data = {
        "subject": f"fact:{fact.pk}",
        "next": reverse("fact-list"),
        "copy": [f"fact:{fact.pk}", f"event:{said.pk}"],
    }
    response = alice_client.post(reverse("forget"), data)
    assert response.status_code == 302 and response.url == reverse("fact-list")
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert not Event.objects.filter(pk=said.pk).exists()
    assert Event.objects.filter(pk=again.pk).exists()


@pytest.mark.parametrize(
    "data",
    [
        {"subject": "fact:999999", "copy": ["fact:999999"]},  # missing
        {"subject": "event:x", "copy": ["event:x"]},  # malformed
        {"subject": "FACT", "copy": ["FACT"]},
        {"subject": "fact:{fact}"},  # nothing ticked
        {"subject": "fact:{fact}", "copy": ["fact:{fact}", "event:123456789"]},  # not offered
        {"subject": "fact:{fact}", "copy": ["fact:{fact}", "line:main:1:abc:../../etc/passwd"]},
    ],
)
def test_bad_input_is_refused_and_nothing_is_deleted(alice_client, alice, data):
    fact, *_ = stated(alice)
    data = {
        k: [v.format(fact=fact.pk) for v in vs] if isinstance(vs, list) else vs.format(fact=fact.pk)
        for k, vs in data.items()
    }
    count = Event.objects.count()
    response = alice_client.post(reverse("forget"), data)
    assert response.status_code == 400
    assert "nothing was deleted" in response.content.decode().lower()
    assert Fact.objects.filter(pk=fact.pk).exists() and Event.objects.count() == count


def test_one_user_cannot_list_or_forget_anothers(alice, bob_client):
    fact, said, *_ = stated(alice)
    listed = bob_client.get(reverse("forget"), {"subject": f"event:{said.pk}"})
    assert listed.status_code == 404 and "allergic" not in listed.content.decode()
    data = {"subject": f"fact:{fact.pk}", "copy": [f"fact:{fact.pk}", f"event:{said.pk}"]}
    assert bob_client.post(reverse("forget"), data).status_code == 400
    assert Fact.objects.filter(pk=fact.pk).exists() and Event.objects.filter(pk=said.pk).exists()
