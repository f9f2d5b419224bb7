"""Documents in memory in a real browser: a PDF added with the chat's paperclip is
found by memory search with its page, and recalled with it in a new chat."""

from __future__ import annotations

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.documents import BUDGET_PDF
from tests.support.scripted_llm import Reply


def test_it_adds_a_pdf_from_the_chat_and_cites_its_page(page, e2e_llm):
    log_in(page)
    new_chat(page)
    chat_url = page.url
    with page.expect_file_chooser() as chooser:
        page.click("#attach-button")  # the paperclip
    chooser.value.set_files(
        files=[{"name": "Q3 report.pdf", "mimeType": "application/pdf", "buffer": BUDGET_PDF}],
    )
    page.locator("li.note.upload:has-text('Added Q3 report.pdf to memory')").wait_for()
    assert page.url == chat_url

    page.goto("/memory/?q=marketing+budget+for+2027")
    hit = page.locator(".result.file-hit", has_text="48,000 euros").first
    assert "Page 3" in hit.inner_text() and "memory/docs/Q3 report.md" in hit.inner_text()

    page.goto(chat_url)
    new_chat(page)
    e2e_llm.script(Reply(text="48,000 euros, says page 3 of the Q3 report."))
    send(page, "What is the marketing budget for 2027?")
    page.locator(".bubble.assistant:has-text('48,000 euros')").wait_for()
    recall = page.locator("details.recall")
    recall.locator("> summary").click()
    assert "memory/docs/Q3 report.md" in recall.inner_text()
    assert "Page 3" in recall.inner_text()
    page.screenshot(path=str(ARTIFACTS / "documents.png"), full_page=True)
