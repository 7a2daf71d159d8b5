"""Token-exact recording of a multi-turn chat (token-in-token-out).

The model's own tokens are kept exactly as the engine sampled them: trainable, with their rollout
logprobs, never decoded and re-encoded. Everything else (system, user, tool messages and the
template's glue between turns) is appended as the *delta of the chat template*: render the whole
message list, check that the text the recorded tokens stand for is a prefix of it, and tokenize
only the difference, untrainable.

"The text the recorded tokens stand for" is tracked alongside the ids rather than recovered by
decoding them: it is the rendered prompt text, plus for each model turn the decoding of the
sampled tokens (special tokens kept, no clean-up), which is exactly the assistant ``content`` we
store plus the end-of-turn token. So a sampled, non-canonical tokenisation, or a turn cut inside
a multi-byte character, never causes a mismatch: we compare the text the template will render
for the content we stored, and never re-tokenize the model's span.

Consequences worth knowing:
- a turn that stopped at eos (``<|im_end|>``) keeps eos trainable; the template's ``\\n`` after it
  starts the next delta, untrainable (the classic turn-separator bug is to drop it);
- a turn cut at ``max_tokens`` has no eos: the next delta begins with the ``<|im_end|>`` the
  template adds, untrainable (the model never sampled it);
- a template that is not append-only (it rewrites earlier turns) fails the prefix check: the
  recorder then starts a new *segment*, the full re-rendering, untrainable, and records where it
  starts in ``segment_starts``. The next prompt is the current segment only; a learner scores each
  segment as its own sequence.

Images (a vision-language policy, ``vision``): a message's image parts (``{"type": "image",
"sha256": ...}``, pixels in ``images``) render as the template's placeholder, and each placeholder
of a delta is written as the model's processor expands it (``policies.vision``), untrainable, its
place kept in ``image_spans``. Text and images are encoded piece by piece around the placeholders,
which is what the processor's own tokenization gives since a placeholder is a special token.
``prompt_images`` hands the engine the current segment's images with their places.
"""

from __future__ import annotations

from typing import Any, Protocol

from policies.thought import ReasoningFormat, reasoning_mask, reasoning_spans
from policies.types import Generation, PromptImage
from policies.vision import ImageTokens, VisionError, image_bytes
from specs.trajectory import ImageSpan


class RecorderError(RuntimeError):
    """The recorder was driven out of order or given an inconsistent generation."""


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer the recorder uses."""

    eos_token_id: int | None

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], **kwargs: Any) -> str: ...


class ChatRecorder:
    """Records one conversation as token ids, a trainable mask, logprobs and policy versions.

    Drive it as ``start(messages)`` -> (``add_model_turn(gen)`` -> ``add_messages(new)``)* ->
    ``add_model_turn(gen)``; ``start`` and ``add_messages`` return the prompt for the next call.
    ``set_context(messages)`` replaces ``add_messages`` when the next context is not the old one
    plus new messages (an observation rule rewrote it).
    """

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        *,
        end_of_turn_ids: tuple[int, ...] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        reasoning_format: ReasoningFormat = "none",
        vision: ImageTokens | None = None,
    ) -> None:
        """``end_of_turn_ids``: tokens that end a model turn (default: the tokenizer's eos);
        ``template_kwargs``: extra arguments for ``apply_chat_template`` (e.g. a template switch);
        ``reasoning_format``: how a turn marks its explicit reasoning (``policies/thought.py``),
        recorded as the ``reasoning`` mask (``none``: no mask); ``vision``: a vision-language
        policy's image expansion (``None``: a text policy, image parts are refused)."""
        self._tok = tokenizer
        self._reasoning_format: ReasoningFormat = reasoning_format
        self._reasoning: list[int] = []
        if end_of_turn_ids is None:
            if tokenizer.eos_token_id is None:
                raise RecorderError("tokenizer has no eos_token_id; pass end_of_turn_ids explicitly")
            end_of_turn_ids = (tokenizer.eos_token_id,)
        self._end_of_turn = frozenset(end_of_turn_ids)
        self._template_kwargs = dict(template_kwargs or {})
        self._ids: list[int] = []
        self._trainable: list[int] = []
        self._logprobs: list[float] = []
        self._versions: list[int] = []
        self._messages: list[dict[str, Any]] = []
        self._segment_starts: list[int] = [0]
        self._text = ""  # the text the current segment's ids stand for
        self._awaiting_model = False
        self.vision = vision
        self.images: dict[str, str] = {}
        """Every image the conversation holds, base64 by SHA-256 (the agent loop adds tool results')."""
        self._spans: list[ImageSpan] = []

    # -- recording ---------------------------------------------------------------------------

    def start(self, messages: list[dict[str, Any]]) -> list[int]:
        """Record the opening messages (untrainable) and return the first prompt."""
        if self._ids:
            raise RecorderError("start() called twice; a ChatRecorder records one conversation")
        if not messages:
            raise RecorderError("start() needs at least one message")
        self._messages = [dict(m) for m in messages]
        order = self._image_order()
        self._text = self._render()
        self._append(self._encode(self._text, order), trainable=False)
        self._awaiting_model = True
        return self.prompt_ids

    def add_model_turn(self, generation: Generation) -> str:
        """Append the sampled tokens (trainable) and the assistant message; return its text."""
        if not self._awaiting_model:
            raise RecorderError("add_model_turn() needs a prompt first: call start() or add_messages()")
        ids, logprobs = list(generation.token_ids), list(generation.logprobs)
        if len(ids) != len(logprobs):
            raise RecorderError(
                f"generation has {len(ids)} token ids but {len(logprobs)} logprobs; expected one per token"
            )
        ended = bool(ids) and ids[-1] in self._end_of_turn
        content = self._decode(ids[:-1] if ended else ids)
        spans = reasoning_spans(content, self._reasoning_format)
        self._append(
            ids, trainable=True, logprobs=logprobs, reasoning=reasoning_mask(ids, self._decode, spans)
        )
        self._versions.append(generation.version)
        self._text += content + (self._decode(ids[-1:]) if ended else "")
        self._messages.append({"role": "assistant", "content": content})
        self._awaiting_model = False
        return content

    def add_messages(self, new: list[dict[str, Any]]) -> list[int]:
        """Append messages (tool results, user turns) as the template's delta; return the next prompt."""
        if not new:
            raise RecorderError("add_messages() needs at least one message")
        return self.set_context([*self._messages, *new])

    def set_context(self, messages: list[dict[str, Any]]) -> list[int]:
        """Make ``messages`` the model's next context; return the next prompt.

        ``messages`` is the conversation as the model must see it next, e.g. the full history
        reduced by an observation rule (``policies.observations.apply_rule``). When its rendering
        extends the recorded text it is appended as the template's delta (untrainable); when it
        rewrites earlier turns (a windowed observation) a new segment holds the whole rendering.
        """
        if not messages:
            raise RecorderError("set_context() needs at least one message")
        if self._awaiting_model:
            # The prompt ends with the generation prompt, which a re-rendering would not extend.
            raise RecorderError("a new context right after a prompt; expected add_model_turn() first")
        self._messages = [dict(m) for m in messages]
        order = self._image_order()
        rendered = self._render()
        if rendered.startswith(self._text):
            seen = sum(span.start >= self._segment_starts[-1] for span in self._spans)
            self._append(self._encode(rendered[len(self._text) :], order[seen:]), trainable=False)
        else:
            # The template rewrote earlier turns: re-tokenizing the model's span in place would
            # train on tokens it never sampled, so a fresh segment holds the new rendering.
            self._segment_starts.append(len(self._ids))
            self._append(self._encode(rendered, order), trainable=False)
        self._text = rendered
        self._awaiting_model = True
        return self.prompt_ids

    def would_exceed(self, max_context: int, reserve: int = 0) -> bool:
        """Whether the next prompt plus ``reserve`` new tokens is longer than ``max_context``."""
        return len(self._ids) - self._segment_starts[-1] + reserve > max_context

    # -- accessors ---------------------------------------------------------------------------

    @property
    def prompt_ids(self) -> list[int]:
        """What the model conditions on next: the current segment (all ids when there is one)."""
        return self._ids[self._segment_starts[-1] :]

    def prompt_images(self) -> list[PromptImage]:
        """The images of the next prompt (the current segment), their places relative to it."""
        if self.vision is None:
            return []
        segment = self._segment_starts[-1]
        return [
            PromptImage(
                data=image_bytes(self.images, span.sha256, "prompt_images"),
                start=span.start - segment,
                length=span.length,
                placeholder=self.vision.placeholder_ids,
            )
            for span in self._spans
            if span.start >= segment
        ]

    @property
    def token_ids(self) -> list[int]:
        return list(self._ids)

    @property
    def trainable(self) -> list[int]:
        return list(self._trainable)

    @property
    def logprobs(self) -> list[float]:
        return list(self._logprobs)

    @property
    def versions(self) -> list[int]:
        return list(self._versions)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self._messages]

    @property
    def segment_starts(self) -> list[int]:
        return list(self._segment_starts)

    def __len__(self) -> int:
        return len(self._ids)

    def trajectory_fields(self) -> dict[str, Any]:
        """The recorded fields of a ``Trajectory``: ``Trajectory(**fields, task_id=..., ...)``."""
        return {
            "token_ids": self.token_ids,
            "trainable": self.trainable,
            "logprobs": self.logprobs,
            "versions": self.versions,
            "messages": self.messages,
            "segment_starts": self.segment_starts,
            "reasoning": list(self._reasoning) if self._reasoning_format != "none" else [],
            "images": dict(self.images),
            "image_spans": list(self._spans),
        }

    # -- helpers -----------------------------------------------------------------------------

    def _render(self) -> str:
        text = self._tok.apply_chat_template(
            self._messages, tokenize=False, add_generation_prompt=True, **self._template_kwargs
        )
        if not isinstance(text, str):
            raise RecorderError(
                f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str"
            )
        return text

    def _image_order(self) -> list[str]:
        """The SHA-256 of every image part of the messages, in rendering order."""
        order = []
        for i, message in enumerate(self._messages):
            content = message.get("content")
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and part.get("type") == "image":
                    if self.vision is None:
                        raise RecorderError(
                            f"messages[{i}] has an image part but the policy is a text model (no vision)"
                        )
                    order.append(str(part.get("sha256", "")))
        return order

    def _encode(self, text: str, images: list[str]) -> list[int]:
        """``text``'s tokens, each image placeholder in it expanded as the model's processor does
        (``images``: the SHA-256 of those images, in order); their places go to ``image_spans``."""
        if self.vision is None:
            # The template already wrote every special token it wants; add none (no bos twice).
            return list(self._tok.encode(text, add_special_tokens=False))
        pieces = text.split(self.vision.placeholder)
        if len(pieces) - 1 != len(images):
            raise RecorderError(
                f"the rendered text has {len(pieces) - 1} image placeholder(s) "
                f"{self.vision.placeholder!r} where the messages have {len(images)} image part(s); "
                "expected one per image part (is the placeholder escaped in tool text?)"
            )
        ids: list[int] = []
        for piece, sha in zip(pieces, [*images, None], strict=True):
            ids.extend(self._tok.encode(piece, add_special_tokens=False))
            if sha is not None:
                try:
                    expanded = self.vision.expand(image_bytes(self.images, sha, "ChatRecorder"))
                except VisionError as e:
                    raise RecorderError(str(e)) from e
                self._spans.append(
                    ImageSpan(sha256=sha, start=len(self._ids) + len(ids), length=len(expanded))
                )
                ids.extend(expanded)
        return ids

    def _decode(self, ids: list[int]) -> str:
        # Keep special tokens and skip clean-up so the text is what the ids spell, byte for byte.
        return self._tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _append(
        self,
        ids: list[int],
        *,
        trainable: bool,
        logprobs: list[float] | None = None,
        reasoning: list[int] | None = None,
    ) -> None:
        self._ids.extend(ids)
        self._trainable.extend([int(trainable)] * len(ids))
        self._logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self._reasoning.extend(reasoning if reasoning is not None else [0] * len(ids))
