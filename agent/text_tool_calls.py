"""Tool calls written as the answer's text. The Qwen2.5-Coder models often answer
with a bare `{"name": ..., "arguments": ...}` object (the 1.5B sometimes in
doubled braces, or alone in a ```json block) instead of their template's
tool-call tags, so llama.cpp passes it on as text; the 0.5B often ends it one
closing brace short (measured: also at temperature 0, where the same prompt gives
the same short answer). Such an answer is a call only
when it is nothing but that object, names a tool on offer and its arguments pass
the tool's schema: anything else stays what the model said."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agent.llm import ToolCall
from agent.tools import Tool, ToolError, parse_arguments

# The whole answer one fenced block: the fence is the object's wrapping, not prose.
FENCED = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


def _object(text: str) -> dict[str, Any] | None:
    if fenced := FENCED.fullmatch(text):
        text = fenced.group(1)
    doubled = text[1:-1] if text.startswith("{{") and text.endswith("}}") else ""
    # Only the braces left open at the end are closed: whatever else is wrong stays text.
    unclosed = text.count("{") - text.count("}")
    closed = text + "}" * unclosed if text.startswith("{") and 0 < unclosed <= 2 else ""
    # ...and a list's bracket written once too often before the last brace (the 0.5B
    # closing `"facts": [...]` twice) is dropped.
    stray = text.count("]") - text.count("[") == 1 and text.startswith("{") and text.endswith("]}")
    unbracketed = text[:-2] + "}" if stray else ""
    for candidate in (text, doubled, closed, unbracketed):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # deep nesting: any answer of many `[`
            continue
        if isinstance(value, dict):
            return value
    return None


def tool_call_in_text(content: str, tools: Sequence[Tool], call_id: str) -> ToolCall | None:
    value = _object(content.strip())
    if value is None or set(value) != {"name", "arguments"}:
        return None
    arguments = value["arguments"]
    tool = next((tool for tool in tools if tool.name == value["name"]), None)
    tool = tool or only_taker(arguments, tools)
    if tool is not None and isinstance(arguments, list) and (name := sole_list(tool)):
        arguments = {name: arguments}
    if tool is None or not isinstance(arguments, dict | str):
        return None
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    try:
        parse_arguments(tool, raw)
    except ToolError:
        return None
    return ToolCall(id=call_id, name=tool.name, arguments=raw)


def only_taker(arguments: Any, tools: Sequence[Tool]) -> Tool | None:
    """The one tool on offer whose arguments these are, when the call names none: the
    0.5B sometimes puts a word of the message where the tool's name goes
    (`{"name": "Aiko", "arguments": {"facts": [...]}}`). Only when exactly one tool
    takes all these arguments; the schema check follows."""
    if not isinstance(arguments, dict) or not arguments:
        return None
    takers = [
        tool for tool in tools if set(arguments) <= set(tool.parameters.get("properties") or {})
    ]
    return takers[0] if len(takers) == 1 else None


def sole_list(tool: Tool) -> str | None:
    """The tool's one array argument, if it has exactly one: the 0.5B, asked to list
    several facts in remember_fact's `facts`, writes the list as the arguments."""
    properties = tool.parameters.get("properties") or {}
    lists = [name for name, spec in properties.items() if spec.get("type") == "array"]
    return lists[0] if len(lists) == 1 else None


def call_written_so_far(partial: str, tools: Sequence[Tool]) -> str | None:
    """The call at the start of an answer still being written, once a second object
    begins on a new line: the 0.5B, answering a tool's result, writes the same call
    again and again until max_answer_tokens (minutes on a CPU). Its first call is
    what it meant, and the rest is not worth waiting for; None while that is not so."""
    text = partial.lstrip()
    if not text.startswith("{") or "\n{" not in text:
        return None
    head = text.split("\n{", 1)[0].rstrip()
    return head if tool_call_in_text(head, tools, "probe") is not None else None
