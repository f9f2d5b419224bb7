"""Code blocks highlighted on the server, still sanitised (issue 27 part 4)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from core import highlight
from core.markdown import markdown_to_html, render_markdown


def test_it_highlights_a_code_block_that_names_its_language():
    html = render_markdown("```python\ndef greet(name):\n    return name\n```")
    assert '<code class="language-python">' in html
    assert '<span class="k">def</span>' in html
    assert '<span class="nf">greet</span>' in html


def test_it_leaves_a_block_without_a_language_or_with_an_unknown_one_plain():
    for fence in ("```", "```no-such-language"):
        html = render_markdown(f"{fence}\nx = <b>1</b>\n```")
        assert "<span" not in html
        assert "x = &lt;b&gt;1&lt;/b&gt;" in html


def test_it_highlights_only_the_languages_whose_cost_was_measured():
    # c-objdump is a Pygments lexer, and one that takes seconds on crafted input.
    html = markdown_to_html("```c-objdump\nint x;\n```")
    assert "<span" not in html and "int x;" in html
    assert '<span class="kt">int</span>' in markdown_to_html("```C\nint x;\n```")


def test_it_highlights_at_most_its_budget_of_code_in_one_message():
    block = "x = 1\n" * (highlight.HIGHLIGHT_BUDGET // 6 - 10)
    html = markdown_to_html(f"```python\n{block}```\n\n```python\n{block}```")
    first, second = html.split("</pre>")[:2]
    assert '<span class="n">x</span>' in first
    assert "<span" not in second and "x = 1" in second
    # The budget is per message: the next one is highlighted again.
    assert '<span class="n">x</span>' in markdown_to_html(f"```python\n{block}```")


def test_it_leaves_a_block_with_a_very_long_line_plain():
    line = "y" * (highlight.LINE_LIMIT + 1)
    html = markdown_to_html(f"```diff\n+ a\n{line}\n```")
    assert "<span" not in html and line in html


def test_it_keeps_hostile_code_escaped_inside_the_highlighted_block():
    hostile = (
        "```html\n"
        '<script>alert(1)</script><img src=x onerror="alert(2)">\n'
        '<a href="javascript:alert(3)">x</a></code></pre><script>alert(4)</script>\n'
        "```"
    )
    html = markdown_to_html(hostile)
    assert "<script" not in html and "<img" not in html and "<a " not in html
    assert html.count("</pre>") == 1
    assert '<span class="p">&lt;</span><span class="nt">script</span>' in html


def test_it_drops_attributes_a_hostile_info_string_tries_to_add():
    html = markdown_to_html('```python" onmouseover="alert(1)\nprint(1)\n```')
    assert html.startswith('<pre><code class="language-python&quot;">print(1)')
    assert "onmouseover" not in html


def test_it_keeps_spans_only_with_their_class():
    # A raw span in the text is escaped; only Pygments' own spans survive, class only.
    html = markdown_to_html('<span style="x" onclick="alert(1)">hi</span>')
    assert "<span" not in html and "&lt;span" in html


def test_it_ships_the_theme_css_that_pygments_generates():
    committed = Path(settings.SITE_DIR, "static", "neotask", "highlight.css").read_text()
    assert committed == highlight.theme_css(), (
        "neotask_site/static/neotask/highlight.css is stale: regenerate it with "
        "python -c 'from core.highlight import theme_css; print(theme_css(), end=\"\")'"
        " > neotask_site/static/neotask/highlight.css"
    )
    assert "@media (prefers-color-scheme: dark)" in committed
