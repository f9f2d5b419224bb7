"""agent.repetition: a loop at the end of a streamed answer is found, and the
repetition legitimate answers hold (lists, tables, code, rules) is not."""

from __future__ import annotations

import pytest

from agent.repetition import CHECK_EVERY, MIN_SPAN, RepetitionWatch, find_loop

LOOP = "I'm allergic to peanuts. I live in Porto. "


def streamed(text: str, step: int = 3) -> int | None:
    """Where a watch fed `text` a few characters at a time stops it, if it does."""
    watch = RepetitionWatch()
    for end in range(step, len(text) + step, step):
        if watch.loop_in(text[:end]) is not None:
            return end
    return None


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("Sure. " + LOOP * 12, id="a sentence pair again and again"),
        pytest.param("Here:\n" + "- Avoid peanut butter and satay sauce.\n" * 15, id="a bullet"),
        pytest.param(
            "Tips:\n" + "".join(f"{n}. Check the label for nuts.\n" for n in range(1, 30)),
            id="a numbered item, its number going up",
        ),
        pytest.param(
            "Plan:\n" + "Monday: rest and stretch.\nTuesday: swim.\n" * 12, id="two lines in turn"
        ),
        pytest.param("Oh " + "no " * 200, id="one word"),
        pytest.param("Wow" + "!" * 500, id="one character"),
        pytest.param(
            "The answer is that the plan works because the plan works, and so on, " * 8,
            id="a long block three times and more",
        ),
        pytest.param("```python\n" + "def f():\n    return f()\n\n" * 80, id="code over CODE_SPAN"),
    ],
)
def test_it_finds_a_loop(answer):
    loop = find_loop(answer)
    assert loop is not None
    # What is kept is what came before the loop's second copy: one copy of it.
    assert len(loop.kept) < len(answer) // 2
    assert streamed(answer) is not None


def test_it_keeps_the_answer_up_to_the_first_copy():
    loop = find_loop("Sure! Here is what I know. " + LOOP * 12)
    assert loop is not None
    assert loop.kept == "Sure! Here is what I know. I'm allergic to peanuts. I live in Porto."
    numbered = "Tips:\n" + "".join(f"{n}. Check the label.\n" for n in range(1, 40))
    loop = find_loop(numbered)
    assert loop is not None
    assert loop.kept.startswith("Tips:\n1. Check the label.")
    assert loop.kept.count("Check the label.") == 1


def test_it_stops_a_loop_soon_after_min_span():
    answer = "Sure. " + LOOP * 40
    stopped = streamed(answer)
    assert stopped is not None
    # Within MIN_SPAN of the loop's start, a block and a look later.
    assert stopped <= len("Sure. ") + MIN_SPAN + len(LOOP) + CHECK_EVERY


TABLE = "| n | n squared | n cubed |\n|---|---|---|\n" + "".join(
    f"| {n} | {n * n} | {n**3} |\n" for n in range(1, 120)
)
TEMPLATE = "| Day | Meal | Notes |\n|-----|------|-------|\n" + "|     |      |       |\n" * 12
MATRIX = (
    "```python\nboard = [\n"
    + "    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],\n" * 10
    + "]\nprint(board)\n```\n"
)
CODE = "```python\n" + "".join(
    f"def handler_{n}(event):\n    log(event)\n    return process(event, {n})\n\n"
    for n in range(40)
)
LIST = "Shopping list:\n" + "".join(
    f"{n}. {item}\n"
    for n, item in enumerate(
        "Apples, bananas, oat milk, rice, lentils, spinach, tomatoes, onions, garlic, "
        "olive oil, bread, eggs, yoghurt, cheese, coffee, tea, pasta, chickpeas".split(", "),
        1,
    )
)
PROSE = (
    "A lighthouse keeper lived on a small island with her cat. Every evening she climbed "
    "the stairs, lit the lamp and wrote the weather in her log. The cat watched the gulls. "
    "In winter the storms came, and ships passed safely because the light never went out. "
    "Years later, a child from the village asked her why she stayed; she said the sea "
    "needed someone to keep watch, and the cat agreed. "
) * 1  # told once


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(TABLE, id="a table of numbers"),
        pytest.param(TEMPLATE, id="a template's empty rows"),
        pytest.param(MATRIX, id="a zero matrix in code"),
        pytest.param(CODE, id="code of similar functions"),
        pytest.param(LIST, id="a numbered list"),
        pytest.param(PROSE, id="prose"),
        pytest.param("# Title\n" + "=" * 120 + "\n\nText under a rule.", id="a long rule"),
        pytest.param("Row, row, row your boat, " * 3 + "gently down the stream.", id="a refrain"),
        pytest.param("Yes. Yes. " + PROSE, id="a block said twice"),
        pytest.param(
            "Step 1: mix.\nStep 2: mix again.\nStep 3: bake.\n" * 2 + PROSE, id="steps twice"
        ),
    ],
)
def test_it_lets_legitimate_repetition_through(answer):
    assert find_loop(answer) is None
    assert streamed(answer) is None


def test_a_watch_looks_only_every_few_characters():
    watch = RepetitionWatch()
    answer = "Sure. " + LOOP * 12
    assert watch.loop_in(answer) is not None
    assert watch.loop_in(answer + "x") is None  # too soon for another look
