"""What the domains' scripted experts share: replaying a script of tool calls against a conversation.

A script is a generator that yields one tool call at a time, ``(server__tool, arguments, why)``, and
is sent each call's result; it returns the final answer. ``respond_with`` runs it afresh over the
tool results seen so far in the conversation (after the task's instruction: the system prompt shows
the tags as an example) and returns the next assistant message: the next call (with the reasoning
span when the recorder asks for one) or the final answer. A ``failure`` raised by the script or by
``parse`` ends the episode with a reply that says what failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator
from typing import Any

Call = tuple[str, dict[str, Any], str]
"""(server__tool, arguments, why)."""
Script = Generator[Call, Any, str]
RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)


def tool_results(task: Any, conversation: str) -> list[str]:
    """The text of every tool result after ``task``'s instruction, in order."""
    after_task = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
    return RESPONSE.findall(after_task)


def respond_with(
    script: Script,
    task: Any,
    conversation: str,
    parse: Callable[[str], Any],
    failure: type[Exception],
) -> str:
    """The next assistant message of ``script`` replayed over the conversation's tool results."""
    try:
        step = next(script)
        for text in tool_results(task, conversation):
            step = script.send(parse(text))
    except StopIteration as done:
        return str(done.value)
    except failure as e:
        return f"I could not finish the request: {e}"
    name, arguments, why = step
    think = f"<think>{why}</think>\n" if "<think></think>" in conversation else ""
    return f"{think}{why}\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
