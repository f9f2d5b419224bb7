"""What the page tests send and read."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

# The header htmx sends: the view answers with a partial.
HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def text(response: HttpResponse) -> str:
    return response.content.decode()
