"""The seed's ``deepresearch.llm_as_judge`` op: an LLM judges the reply against the reference answer.

Follows MCP-Universe's deep-research judge (``mcpuniverse/evaluator/deepresearch/functions.py``, the
HLE / BrowseComp judge prompt): the judge model extracts the reply's final answer, reasons only about
whether it matches the ``[correct_answer]``, and says ``correct: yes|no``; yes passes. Any
OpenAI-compatible ``/chat/completions`` endpoint serves (vLLM, llama.cpp, a hosted API)::

    {"func": "raw", "op": "deepresearch.llm_as_judge",
     "op_args": {"correct_answer": "Sihaven", "base_url": "{{JUDGE_BASE_URL}}",
                 "model": "{{JUDGE_MODEL}}", "api_key_env": "JUDGE_API_KEY"}}

``correct_answer`` (or the spec's ``value``) is the reference; ``base_url`` the endpoint's root
(``.../v1``; ``/chat/completions`` is appended); ``api_key_env`` names the variable holding a bearer
token (unset or empty: no Authorization header); ``timeout_s`` bounds each request (default 60) and
``retries`` the further tries after a transport error or a 5xx (default 2). The judge is asked for a
JSON object; a plain ``correct: yes`` line is accepted too. A judge that cannot be reached or
answers something unreadable is an ``EvaluatorError`` (the episode is lost, never a silent 0).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import httpx

from rewards.ops import EvalOutcome
from specs.env import EnvHandle
from specs.errors import EvaluatorError
from specs.registry import evaluator
from specs.task import TaskSpec
from specs.trajectory import Trajectory

_CORRECT = re.compile(r"[\"']?correct[\"']?\s*[:=]\s*[\"']?(yes|no)\b", re.IGNORECASE)
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def judge_prompt(question: str, response: str, correct_answer: str) -> str:
    """The HLE judge prompt (MCP-Universe's), asking for the verdict as a JSON object."""
    return (
        "Judge whether the following [response] to [question] is correct or not based on the precise and "
        "unambiguous [correct_answer] below.\n\n"
        f"[question]: {question}\n\n[response]: {response}\n\n"
        "Your judgement must be in the format and criteria specified below:\n\n"
        "extracted_final_answer: The final exact answer extracted from the [response]. Put the extracted "
        "answer as 'None' if there is no exact, final answer to extract from the response.\n\n"
        f"[correct_answer]: {correct_answer}\n\n"
        "reasoning: Explain why the extracted_final_answer is correct or incorrect based on [correct_answer], "
        "focusing only on if there are meaningful differences between [correct_answer] and the "
        "extracted_final_answer. Do not comment on any background to the problem, do not attempt to solve the "
        "problem, do not argue for any answer different than [correct_answer], focus only on whether the "
        "answers match.\n\n"
        "correct: Answer 'yes' if extracted_final_answer matches the [correct_answer] given above, or is within "
        "a small margin of error for numerical problems. Answer 'no' otherwise, i.e. if there is any "
        "inconsistency, ambiguity, non-equivalency, or if the extracted answer is incorrect.\n\n"
        "confidence: The extracted confidence score between 0% and 100% from [response]. Put 100 if there is "
        "no confidence score available.\n\n"
        'Reply with one JSON object: {"extracted_final_answer": str, "reasoning": str, '
        '"correct": "yes" or "no", "confidence": int}'
    )


def parse_verdict(content: str) -> tuple[bool, str]:
    """(correct, extracted answer) from the judge's reply; ``EvaluatorError`` when it says neither."""
    found = _JSON.search(content)
    if found:
        try:
            data = json.loads(found.group())
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and str(data.get("correct", "")).strip().lower() in ("yes", "no"):
            return str(data["correct"]).strip().lower() == "yes", str(data.get("extracted_final_answer", ""))
    line = _CORRECT.search(content)
    if line:
        return line.group(1).lower() == "yes", ""
    raise EvaluatorError(
        f"deepresearch.llm_as_judge: the judge's reply has no 'correct: yes|no': {content[:300]!r}"
    )


def _content(body: Any, url: str) -> str:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EvaluatorError(
            f"deepresearch.llm_as_judge: {url} answered no choices[0].message.content: {str(body)[:300]!r}"
        ) from None
    if not isinstance(content, str):
        raise EvaluatorError(f"deepresearch.llm_as_judge: {url} answered a non-text content {content!r}")
    return content


async def ask_judge(
    base_url: str, model: str, prompt: str, *, api_key: str | None, timeout_s: float, retries: int
) -> str:
    """The judge's reply text to ``prompt`` (temperature 0)."""
    if "{{" in base_url or "{{" in model or not base_url.startswith(("http://", "https://")):
        raise EvaluatorError(
            f"deepresearch.llm_as_judge: base_url {base_url!r} / model {model!r} are not filled: set "
            "JUDGE_BASE_URL and JUDGE_MODEL (environment or domain.task_vars)"
        )
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0}
    error = ""
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        for _ in range(retries + 1):
            try:
                reply = await client.post(url, json=payload, headers=headers)
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}"
                continue
            if reply.status_code >= 500:
                error = f"status {reply.status_code}: {reply.text[:200]!r}"
                continue
            if reply.status_code != 200:
                raise EvaluatorError(
                    f"deepresearch.llm_as_judge: {url} answered status {reply.status_code}: {reply.text[:300]!r}"
                )
            try:
                return _content(reply.json(), url)
            except json.JSONDecodeError:
                raise EvaluatorError(
                    f"deepresearch.llm_as_judge: {url} answered non-JSON: {reply.text[:300]!r}"
                ) from None
    raise EvaluatorError(f"deepresearch.llm_as_judge: {url} failed {retries + 1} times, last: {error}")


@evaluator("deepresearch.llm_as_judge")
async def llm_as_judge(
    env: EnvHandle,
    task: TaskSpec,
    trajectory: Trajectory,
    value: Any = None,
    *,
    base_url: str,
    model: str,
    correct_answer: str | None = None,
    api_key_env: str | None = None,
    timeout_s: float = 60.0,
    retries: int = 2,
) -> EvalOutcome:
    """Pass when the judge says the reply's final answer matches ``correct_answer``."""
    reference = correct_answer if correct_answer is not None else value
    if not isinstance(reference, str) or not reference.strip():
        raise EvaluatorError(f"deepresearch.llm_as_judge: task {task.instance_id} gives no correct_answer")
    response = trajectory.final_answer or ""
    if not response.strip():
        return EvalOutcome(passed=False, reason="empty reply: nothing for the judge to read")
    api_key = os.environ.get(api_key_env) if api_key_env else None
    prompt = judge_prompt(task.instruction, response, reference)
    content = await ask_judge(base_url, model, prompt, api_key=api_key, timeout_s=timeout_s, retries=retries)
    correct, extracted = parse_verdict(content)
    if correct:
        return EvalOutcome(passed=True)
    return EvalOutcome(
        passed=False, reason=f"the judge ({model}) found {extracted!r} not equal to {reference!r}"
    )
