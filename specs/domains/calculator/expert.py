"""The calculator domain's scripted expert, for warm-start demonstrations.

``respond(task, conversation)`` plays the ideal agent: first it calls the calculator with the
task's reference expression (the private ``_expression`` field), then it reads the tool's answer
from the last ``<tool_response>`` and states it. It never computes the answer itself: the number it
gives is the one the real MCP server returned, so a demonstration is a real episode.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL = "calculator__calculate"
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)


def respond(task: Any, conversation: str) -> str:
    """The next assistant message for ``task`` given the conversation rendered so far."""
    # Only what came after the task itself: the system prompt shows the tags as an example.
    after_task = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
    responses = _RESPONSE.findall(after_task)
    think = "<think></think>" in conversation  # a Thought-MDP run asks for reasoning before each action
    if not responses:
        expression = task.private.get("_expression")
        if not expression:
            raise ValueError(
                f"task {task.instance_id}: the calculator expert needs a private '_expression' field"
            )
        call = {"name": TOOL, "arguments": {"expression": expression}}
        plan = f"<think>The question asks for {expression}. I will compute it with the calculator.</think>\n"
        return f"{plan if think else ''}I will compute this with the calculator.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
    result = responses[-1].strip()
    check = f"<think>The calculator returned {result}; that answers the question.</think>\n"
    return f"{check if think else ''}The calculator gives {result}. The answer is {result}."
