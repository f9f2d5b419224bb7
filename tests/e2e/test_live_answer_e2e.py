"""Never silent: a sent message shows its answer's place at once, then what the
turn does, until the answer streams; a turn that only used tools says what they did."""

from __future__ import annotations

import json
import threading

from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.scripted_llm import Reply, reply_with_tool

# When Enter went down, when the placeholder showed and when the first words
# replaced it, by the page's own clock.
WATCH = """() => {
  const seen = (window.seen = {});
  document.getElementById("input").addEventListener("keydown", (key) => {
    if (key.key === "Enter") seen.enter ??= performance.now();
  }, { capture: true });
  new MutationObserver(() => {
    const streaming = document.querySelector("#events .streaming");
    if (!streaming) return;
    if (streaming.classList.contains("pending")) seen.placeholder ??= performance.now();
    else if (streaming.textContent) seen.words ??= performance.now();
  }).observe(document.getElementById("events"),
    { subtree: true, childList: true, characterData: true, attributes: true });
}"""


def test_the_answer_shows_a_sign_of_life_until_it_streams(page, e2e_llm):
    log_in(page)
    new_chat(page)
    release = threading.Event()  # the model's first token waits for it
    e2e_llm.script(Reply(deltas=["Here ", "it ", "is."], hold=release))
    page.evaluate(WATCH)
    send(page, "What do you know about me?")

    placeholder = page.locator("#events .streaming.pending .bubble")
    placeholder.wait_for()
    # The server's status: the model reading its prompt, the seconds ticking.
    page.wait_for_function(
        """() => /^The model is reading [\\d,]+ tokens… [1-9]\\d* s$/.test(
            document.querySelector("#events .streaming.pending .bubble")?.textContent)"""
    )
    # Below the message it answers (and what was recalled for it, if anything).
    classes = page.locator("#events > li").evaluate_all("items => items.map(i => i.className)")
    above = [name for name in classes[:-1] if "recall" not in name]
    assert "user_message" in above[-1] and "streaming" in classes[-1]
    page.screenshot(path=str(ARTIFACTS / "answer-placeholder.png"))
    page.set_viewport_size({"width": 390, "height": 800})  # a phone: the placeholder fits
    box = placeholder.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    page.screenshot(path=str(ARTIFACTS / "answer-placeholder-phone.png"))
    release.set()

    answer = page.locator(".assistant_response .bubble.markdown").last
    answer.wait_for()
    assert answer.inner_text() == "Here it is."
    assert page.locator("#events .streaming").count() == 0
    seen = page.evaluate("window.seen")
    assert seen["enter"] <= seen["placeholder"] < seen["words"]
    print(f"placeholder {seen['placeholder'] - seen['enter']:.0f} ms after Enter")


def test_a_turn_that_only_saved_a_fact_says_so(page, e2e_llm):
    log_in(page)
    new_chat(page)
    allergy = {"category": "health", "key": "allergy", "value": "peanuts"}
    e2e_llm.script(reply_with_tool("remember_fact", allergy), Reply(text=""))
    send(page, "I'm allergic to peanuts")
    # Said once: the memory notice with its Undo, not a "Saved: …" answer beside it.
    saved = ".memory-note:has-text('Remembered: peanuts')"
    page.locator(saved).wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    confirmations = page.locator(".assistant_response.confirmation")
    expect(confirmations).to_have_count(1)
    expect(confirmations).to_be_hidden()
    expect(page.locator(".bubble.assistant")).to_have_count(0)  # nor its Copy, Regenerate
    expect(page.locator("button.regenerate")).to_have_count(0)

    # The small model's way: a call written as text, then the same call again.
    call = json.dumps({"name": "remember_fact", "arguments": allergy | {"key": "avoid"}})
    e2e_llm.script(Reply(text=call), Reply(text=call))
    send(page, "So I avoid them")
    expect(page.locator(".memory-note:has-text('Remembered: peanuts')")).to_have_count(2)
    page.locator("#chat:not(.busy)").wait_for()
    note = page.locator("details.tool.repeated p:has-text('again with the same arguments')")
    assert note.count() == 1 and not note.is_visible()  # inside the fold, closed
    assert page.locator(".note:has-text('again with the same arguments')").count() == 0

    # A tool the notice does not tell of still gets its plain confirmation.
    e2e_llm.script(reply_with_tool("search_memory", {"query": "xyzzy"}), Reply(text=""))
    send(page, "Search my memory for xyzzy")
    searched = ".assistant_response.confirmation .bubble:has-text('Searched memory')"
    page.locator(searched).wait_for()

    page.reload()
    expect(page.locator(saved)).to_have_count(2)
    expect(page.locator(".bubble.assistant")).to_have_count(1)
    assert page.locator("details.tool.repeated").count() == 1
    page.screenshot(path=str(ARTIFACTS / "answer-confirmation.png"), full_page=True)
