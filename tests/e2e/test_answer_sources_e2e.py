"""Sources under an answer in a real browser: a PDF in memory, an answer that uses
its second page, and the line "Sources: …, p. 2" under it, linked to the file, on a
desktop and on a phone."""

from __future__ import annotations

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.documents import ORION_PDF
from tests.support.scripted_llm import Reply


def test_an_answer_shows_the_document_and_page_it_used(page, e2e_llm):
    log_in(page)
    page.goto("/memory/files/")
    page.set_input_files(
        "input[name=document]",
        files=[
            {"name": "Project Orion plan.pdf", "mimeType": "application/pdf", "buffer": ORION_PDF}
        ],
    )
    page.click("button:has-text('Add document')")
    page.locator("a:has-text('memory/docs/Project Orion plan.md')").wait_for()

    page.goto("/")
    new_chat(page)
    # The model cites nothing: the line comes from what the answer used.
    e2e_llm.script(Reply(text="It ships to the Lisbon lab in March."))
    send(page, "Where does the Orion prototype ship?")
    answer = page.locator(".event.assistant_response", has_text="Lisbon lab")
    sources = answer.locator("p.sources")
    sources.wait_for()
    assert sources.inner_text() == "Sources: Project Orion plan.pdf, p. 2"
    page.screenshot(path=str(ARTIFACTS / "answer-sources.png"))

    # Reloaded, it is still there (kept on the answer's event).
    page.reload()
    sources.wait_for()
    # On a phone the line wraps inside the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    box = sources.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    page.screenshot(path=str(ARTIFACTS / "answer-sources-phone.png"))

    sources.locator("a").click()
    page.locator("h1:has-text('memory/docs/Project Orion plan.md')").wait_for()
    assert "The Orion prototype ships to the Lisbon lab" in page.locator("textarea").input_value()
