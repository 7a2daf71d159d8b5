"""The swe domain's scripted expert: it fixes the planted bug through the real shell server.

``respond(task, conversation)`` plays a developer who knows the fix (the private ``_mutation``:
file, line, the original and the mutated lines) but acts only through ``shell__shell_execute``:

1. ``grep -n -F -x`` the first mutated line in the file, to find where it is now;
2. ``patch`` the file with a unified diff (sent on stdin) that puts the original lines back at the
   line number grep reported (the recorded one when grep finds nothing);
3. ``make test`` to run the project's visible tests;
4. a final answer summarising the change and quoting the test run's last line.

Each step reads what the previous tool call returned, so a demonstration is a real episode.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL = "shell__shell_execute"
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_GREP_LINE = re.compile(r"^(\d+):", re.MULTILINE)


def _call(arguments: dict[str, Any], say: str, think: str | None) -> str:
    plan = f"<think>{think}</think>\n" if think is not None else ""
    call = {"name": TOOL, "arguments": arguments}
    return f"{plan}{say}\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _diff(file: str, line: int, mutated: str, original: str) -> str:
    old, new = mutated.splitlines(), original.splitlines()
    body = [f"-{text}" for text in old] + [f"+{text}" for text in new]
    header = f"--- a/{file}\n+++ b/{file}\n@@ -{line},{len(old)} +{line},{len(new)} @@\n"
    return header + "\n".join(body) + "\n"


def _found_line(response: str, expected: int) -> int:
    numbers = [int(n) for n in _GREP_LINE.findall(response)]
    if expected in numbers or not numbers:
        return expected
    return min(numbers, key=lambda n: abs(n - expected))


def respond(task: Any, conversation: str) -> str:
    """The next assistant message for ``task`` given the conversation rendered so far."""
    mutation = task.private.get("_mutation")
    if not isinstance(mutation, dict):
        raise ValueError(f"task {task.instance_id}: the swe expert needs a private '_mutation' field")
    after_task = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
    responses = _RESPONSE.findall(after_task)
    thinking = "<think></think>" in conversation
    file, line = str(mutation["file"]), int(mutation["line"])
    original, mutated = str(mutation["original"]), str(mutation["mutated"])
    first = mutated.splitlines()[0] if mutated else original.splitlines()[0]

    def think(text: str) -> str | None:
        return text if thinking else None

    if len(responses) == 0:
        return _call(
            {"command": ["grep", "-n", "-F", "-x", "-e", first, file]},
            f"The report points at `{file}`. Let me find the suspicious line.",
            think(f"The symptom suggests a bug in {file}; I will look at the line that computes it."),
        )
    if len(responses) == 1:
        at = _found_line(responses[0], line)
        return _call(
            {
                "command": ["patch", "--no-backup-if-mismatch", file],
                "stdin": _diff(file, at, mutated, original),
            },
            f"Line {at} is wrong ({mutation.get('detail', 'the logic')}); I will patch it.",
            think(f"Line {at} explains the symptom; restore the intended logic there."),
        )
    if len(responses) == 2:
        return _call(
            {"command": ["make", "test"]},
            "Now I run the project's tests.",
            think("The patch applied; check that the tests pass."),
        )
    tail = [text for text in responses[-1].splitlines() if text.strip()][-1:] or ["(no output)"]
    check = f"<think>The tests report {tail[0].strip()}; the fix is done.</think>\n" if thinking else ""
    return (
        f"{check}Fixed the bug in `{file}` at line {line}: {mutation.get('detail', 'restored the logic')}. "
        f"`make test` now ends with: {tail[0].strip()}"
    )
