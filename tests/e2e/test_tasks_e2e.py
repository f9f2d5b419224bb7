"""The tasks page in a real browser: a task from natural language, previewed, created, paused."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, log_in


def test_it_creates_a_task_from_natural_language_and_pauses_it(page):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page)
    page.click("#site-nav summary:has-text('Automations')")  # the group, then its link
    page.click("#site-nav a:has-text('Tasks')")
    page.wait_for_url("**/tasks/")

    # The preview follows the typing: the cron expression and the next three runs.
    page.type("#id_schedule", "every weekday at 9am", delay=20)
    preview = page.locator("#schedule-preview")
    # Retried: while typing, "every weekday at 9a" briefly shows an error instead.
    expect(preview.locator("code")).to_have_text("0 9 * * 1-5")
    expect(preview.locator("ol.runs li")).to_have_count(3)
    runs = preview.locator("ol.runs li").all_inner_texts()
    assert all(run.endswith("09:00") for run in runs)
    assert not any(run.startswith(("Sat", "Sun")) for run in runs)

    page.fill("#id_prompt", "summarise my open todos")
    page.fill("#id_name", "Weekday todos")
    url = page.url
    page.click("button:has-text('Create task')")
    row = page.locator("tr:has-text('Weekday todos')")
    row.wait_for()
    assert page.url == url  # swapped in by htmx, no page load
    assert "Created “Weekday todos”" in page.locator("#tasks [role=status]").inner_text()
    assert "every weekday at 9am" in row.inner_text()
    assert row.locator("td:nth-child(3) time").inner_text().endswith("09:00 UTC")
    assert row.locator(".badge:has-text('Active')").count() == 1

    row.locator("button:has-text('Pause')").click()
    row.locator(".badge:has-text('Paused')").wait_for()
    assert row.locator("button:has-text('Resume')").count() == 1
    assert "paused" in row.locator("td:nth-child(3)").inner_text()

    # Still paused after a reload: it was saved, not only redrawn.
    page.reload()
    assert page.locator("tr:has-text('Weekday todos') .badge:has-text('Paused')").count() == 1
    page.screenshot(path=str(ARTIFACTS / "tasks.png"), full_page=True)
    assert dialogs == []


def test_it_edits_a_tasks_schedule_and_prompt_in_place_with_the_preview(page):
    log_in(page)
    page.goto("/tasks/")
    page.fill("#id_schedule", "every day at 8am")
    page.fill("#id_prompt", "water the plants")
    page.fill("#id_name", "Plants")
    page.click("button:has-text('Create task')")
    page.locator("tr:has-text('Plants') a:has-text('Edit')").click()

    form = page.locator("tr.editing")
    schedule = form.locator("input[name=schedule]")
    expect(schedule).to_have_value("every day at 8am")
    expect(form.locator(".preview code")).to_have_text("0 8 * * *")
    schedule.fill("")
    schedule.type("every monday at 6pm", delay=20)
    expect(form.locator(".preview code")).to_have_text("0 18 * * 1")
    expect(form.locator(".preview ol.runs li")).to_have_count(3)
    assert all(run.startswith("Mon") for run in form.locator("ol.runs li").all_inner_texts())
    form.locator("textarea[name=prompt]").fill("water the plants and the garden")
    form.locator("button:has-text('Save')").click()

    expect(page.locator("tr.editing")).to_have_count(0)
    row = page.locator("tr:has-text('Plants')")
    expect(row.locator("[role=status]")).to_have_text('Saved "Plants".')
    assert "every monday at 6pm" in row.inner_text()
    assert "and the garden" in row.inner_text()
    next_run = row.locator("td:nth-child(3) time").inner_text()
    assert next_run.startswith("Mon") and next_run.endswith("18:00 UTC")
    page.reload()  # saved, not only redrawn
    assert "every monday at 6pm" in page.locator("tr:has-text('Plants')").inner_text()
