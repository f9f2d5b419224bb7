"""Sources under an answer (memory.sources): the memory files whose chunks were in the
prompt and that the answer used, with the page a PDF's chunk knows, stored on the
answer's event and shown under it, linked to the file."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.template.loader import render_to_string

from agent.runtime import TurnRequest, run_turn
from core.history import Actor
from memory.documents import add_document, original_names
from memory.models import Event, EventType
from memory.sources import (
    MIN_SHARED_WORDS,
    Cited,
    PromptChunk,
    cited,
    content_words,
    prompt_chunks,
    shared_words,
)
from sessions_app.transcripts import event_record
from tests.support.documents import BUDGET_PDF, ORION_PDF
from tests.support.scripted_llm import Reply
from tests.support.websocket import ignore

BUDGET = PromptChunk(
    "memory/docs/Q3 report.md",
    "Page 3",
    "## Page 3 Budget The marketing budget for 2027 is 48,000 euros.",
)
ORION = PromptChunk(
    "memory/docs/Project Orion plan.md",
    "Page 2",
    "## Page 2 Milestones The Orion prototype ships to the Lisbon lab in March; "
    "Dana Reyes leads the field tests.",
)
VACATION = PromptChunk(
    "memory/docs/Employee handbook.md",
    "Page 4",
    "## Page 4 Vacation Employees get 25 days of paid vacation a year.",
)
QUESTION = "What is the marketing budget for 2027?"


# The method


def test_an_answer_that_uses_a_chunk_cites_its_file_and_page():
    answer = "The marketing budget for 2027 is 48,000 euros."
    assert cited(answer, [ORION, BUDGET], QUESTION) == [Cited(BUDGET.path, pages=(3,))]
    assert cited(answer, [BUDGET], QUESTION)[0].label("Q3 report.pdf") == "Q3 report.pdf, p. 3"


def test_an_unrelated_answer_cites_nothing():
    answer = "Sure! A light pasta with lemon and basil makes a good dinner tonight."
    assert cited(answer, [ORION, BUDGET], "Suggest a dinner for tonight") == []


def test_words_only_the_question_or_filler_share_are_no_use():
    # Stopwords, and how an answer speaks of memory: no content word in common.
    filler = "It is not in the file: I do not know what the page says about it, sorry."
    assert content_words(filler) & content_words(BUDGET.text) == set()
    assert cited(filler, [BUDGET], QUESTION) == []
    # The question echoed back ("marketing", "budget", "2027") is not the chunk used.
    echo = "I don't know the marketing budget for 2027."
    assert cited(echo, [BUDGET], QUESTION) == []


def test_a_few_words_shared_by_chance_in_a_long_answer_are_below_the_bar():
    # The embedded model's answer to a nearby question (bench/answer_sources.py).
    manual = PromptChunk(
        "memory/docs/Car manual.md",
        "Page 12",
        "## Page 12 Tyres Tyre pressure: 2.4 bar front, 2.2 bar rear. Check it monthly, "
        "when the tyres are cold.",
    )
    answer = (
        "To keep your bike in good shape, follow these steps: 1. **Regular Maintenance**: "
        "Keep your bike in good condition by regularly checking for wear and tear, replacing "
        "worn parts. 2. **Check the tire pressure**: inflate the tires before each ride. "
        "3. **Clean the chain**: wipe and oil it every few weeks."
    )
    question = "How do I keep my bike in good shape?"
    assert shared_words(answer, manual.text, question) == {"check", "pressure"}
    assert MIN_SHARED_WORDS == 3
    assert cited(answer, [manual], question) == []
    # A short answer made of the chunk's words is the chunk, however few they are.
    assert cited("25 days", [VACATION], "How many vacation days do I get?") == [
        Cited(VACATION.path, pages=(4,))
    ]


def test_the_model_naming_the_file_cites_it():
    assert cited("See the Project Orion plan.", [ORION, BUDGET], "What is next?") == [
        Cited(ORION.path, pages=(2,))
    ]
    # ...but not the question's name said back.
    assert cited("I cannot open project orion plan.", [ORION], "Open Project Orion plan") == []


def test_pages_of_one_file_go_together_and_sections_name_a_docx_part():
    page_two = PromptChunk(BUDGET.path, "Page 2", "## Page 2 Hiring Two engineers join in May.")
    answer = "Two engineers join in May, and the budget is 48,000 euros."
    found = cited(answer, [BUDGET, page_two], QUESTION)
    assert found == [Cited(BUDGET.path, pages=(2, 3))]
    assert found[0].label("Q3 report.pdf") == "Q3 report.pdf, pp. 2, 3"
    lisbon = PromptChunk(
        "memory/docs/trip.md",
        "Travel plans > Lisbon",
        "The hotel in Lisbon is the Casa Azul, booked for five nights.",
    )
    found = cited("You stay at the Casa Azul for five nights.", [lisbon], "Where do I stay?")
    assert found[0].label("trip.docx") == "trip.docx, Lisbon"


def test_only_memory_files_of_the_recalled_items_are_chunks():
    items = [
        {"source": "session s1, event 4", "event_id": 4, "date": "2026-01-01", "text": "hi"},
        {
            "source": "memory/docs/Q3 report.md:9-12",
            "date": "memory file",
            "heading": "Page 3",
            "text": BUDGET.text,
            "score": 0.7,
        },
        {"source": "MEMORY.md:1-3", "date": "memory file", "text": "Likes tea.", "score": 0.6},
    ]
    assert prompt_chunks(items) == (BUDGET, PromptChunk("MEMORY.md", "", "Likes tea."))


def test_a_document_is_named_by_its_uploaded_file(alice, bob):
    add_document(alice, "main", "Q3 report.pdf", BUDGET_PDF, Actor.user(alice))
    paths = ["memory/docs/Q3 report.md", "MEMORY.md"]
    assert original_names(alice, "main", paths) == {"memory/docs/Q3 report.md": "Q3 report.pdf"}
    assert original_names(bob, "main", paths) == {}


# Through a turn: stored on the answer, shown under it


@pytest.mark.django_db(transaction=True)
async def test_a_turn_keeps_and_shows_the_sources_its_answer_used(alice, bob, llm):
    await sync_to_async(add_document)(
        alice, "main", "Project Orion plan.pdf", ORION_PDF, Actor.user(alice)
    )
    # Bob's document says the same: it is never in Alice's prompt, so never her source.
    await sync_to_async(add_document)(bob, "main", "Bob Orion plan.pdf", ORION_PDF, Actor.user(bob))
    llm.script(
        Reply(text="It ships to the Lisbon lab in March."),
        Reply(text="You're welcome, have a nice day!"),
    )
    request = TurnRequest(owner=alice, session_id="new")
    await run_turn(request, "Where does the Orion prototype ship?", ignore)
    await run_turn(request, "Thanks!", ignore)

    sent = llm.requests[0]["messages"]
    system = "\n".join(m["content"] for m in sent if m["role"] == "system")
    assert "memory/docs/Project Orion plan.md" in system  # the chunk was in the prompt
    assert "Bob Orion plan" not in system
    answers = await sync_to_async(list)(
        Event.objects.filter(owner=alice, event_type=EventType.ASSISTANT_RESPONSE).order_by("id")
    )
    assert answers[0].data["sources"] == [
        {
            "path": "memory/docs/Project Orion plan.md",
            "label": "Project Orion plan.pdf, p. 2",
            "pages": [2],
        }
    ]
    assert "sources" not in answers[1].data  # the chunk still in the prompt, not used

    html = await sync_to_async(render_to_string)("sessions_app/_event.html", {"event": answers[0]})
    assert (
        '<p class="sources small">Sources: <a href="/memory/files/view/?agent=main&amp;'
        'path=memory/docs/Project%20Orion%20plan.md">Project Orion plan.pdf, p. 2</a></p>'
    ) in html
    assert "Sources:" not in await sync_to_async(render_to_string)(
        "sessions_app/_event.html", {"event": answers[1]}
    )
    # A transcript line carries them as a field of their own.
    assert event_record(answers[0])["sources"][0]["label"] == "Project Orion plan.pdf, p. 2"


def test_a_file_name_is_shown_as_text(alice):
    from memory.recording import record

    answer = record(
        alice,
        "s1",
        EventType.ASSISTANT_RESPONSE,
        {
            "content": "Done.",
            "sources": [{"path": "memory/docs/x.md", "label": "<img src=x>.pdf", "pages": []}],
        },
    )
    html = render_to_string("sessions_app/_event.html", {"event": answer})
    assert "&lt;img src=x&gt;.pdf</a>" in html and "<img" not in html
