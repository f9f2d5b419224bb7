from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from core.markdown import render_markdown
from memory.models import Event
from memory.recall import ShownItem, shown_items

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return mark_safe(render_markdown(text))  # sanitised by nh3 in render_markdown


@register.filter
def recalled(event: Event) -> list[ShownItem]:
    """A recall event's memories as its panel shows them (memory.recall.shown_items)."""
    return shown_items(event)
