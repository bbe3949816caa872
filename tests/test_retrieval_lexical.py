"""Analyzer, stemmer and the incremental BM25 index (against rank_bm25.BM25Okapi)."""

from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from aether_context.retrieval import STOP_WORDS, Analyzer, LexicalIndex, content_key, stem

CORPUS = [
    "Aspirin reduces the risk of heart attack in older adults.",
    "Heart disease is the leading cause of death worldwide.",
    "Regular exercise lowers blood pressure and heart rate.",
    "Mutations in the BRCA1 gene raise breast cancer risk.",
    "Breast cancer screening with mammography saves lives.",
    "Vitamin D deficiency is common in northern countries.",
    "The gene mutated in cystic fibrosis is CFTR.",
    "Exercise improves mood and sleep quality.",
    "Smoking causes lung cancer and heart disease.",
    "Blood pressure medication reduces stroke risk.",
    "Sleep deprivation impairs memory consolidation.",
    "A diet rich in fibre lowers cholesterol.",
]
QUERIES = ["heart disease risk", "cancer gene mutations", "exercise exercise sleep", "unknownword", "blood"]


def test_snowball_stems_published_examples():
    pairs = {"caresses": "caress", "ponies": "poni", "hopping": "hop", "running": "run", "happy": "happi",
             "generously": "generous", "mutations": "mutat", "effective": "effect"}
    assert {w: stem(w) for w in pairs} == pairs


def test_analyzer_folds_case_drops_stop_words_and_stems():
    assert Analyzer()("The Mutations were MUTATED, in 2023!") == ["mutat", "mutat", "2023"]
    assert Analyzer(stem=False)("The Mutations were MUTATED") == ["mutations", "mutated"]
    assert Analyzer(stem=False)("Größe über_alles") == ["grosse", "uber", "alles"]
    assert content_key("Hello   World") == content_key("hello world")
    assert "the" in STOP_WORDS and "user" not in STOP_WORDS


def test_camel_case_snake_case_and_digits_meet():
    analyzer = Analyzer()
    assert {"user", "name"} <= set(analyzer("getUserName"))
    assert set(analyzer("MaxRetryCount")) >= set(analyzer("MAX_RETRY_COUNT"))
    assert analyzer("HTTPServer2")[1:] == ["http", "server", "2"]
    index = LexicalIndex(analyzer)
    index.add(["def getUserName(self): return self._name", "class RetryPolicy: MAX_RETRY_COUNT = 3",
               "the weather today"])
    assert index.scores("user name").argmax() == 0
    assert index.scores("MaxRetryCount").argmax() == 1
    assert index.scores("getUserName")[0] > index.scores("user name")[0]  # the whole identifier counts too


def test_diacritics_fold_for_matching_only():
    analyzer = Analyzer()
    assert analyzer("Munchen") == analyzer("München") == analyzer("MÜNCHEN")
    assert analyzer("café crème") == analyzer("cafe creme")
    index = LexicalIndex(analyzer)
    index.add(["Wir wohnen in München.", "Berlin ist groß."])
    assert index.scores("Munchen").argmax() == 0 and index.scores("gross").argmax() == 1


def test_cjk_runs_become_bigrams():
    analyzer = Analyzer()
    assert analyzer("北京") == ["北京"]
    assert "北京" in analyzer("我住在北京市中心")
    index = LexicalIndex(analyzer)
    index.add(["我住在北京市中心", "東京タワーへ行く", "서울에 살아요"])
    assert index.scores("北京").argmax() == 0 and index.scores("北京")[0] > 0
    assert index.scores("東京").argmax() == 1
    assert index.scores("서울").argmax() == 2
    assert analyzer("Python3で書く") [:3] == ["python3", "python", "3"]


def rebuilt(docs: list[str]) -> BM25Okapi:
    analyzer = Analyzer()
    return BM25Okapi([analyzer(d) for d in docs])


@pytest.mark.parametrize("query", QUERIES)
def test_scores_equal_rank_bm25_okapi(query):
    index = LexicalIndex(Analyzer())
    index.add(CORPUS)
    expected = rebuilt(CORPUS).get_scores(Analyzer()(query))
    np.testing.assert_allclose(index.scores(query), expected, rtol=1e-12, atol=1e-12)


def test_incremental_adds_equal_a_rebuild_after_every_step():
    index = LexicalIndex(Analyzer())
    for start in range(0, len(CORPUS), 5):
        index.add(CORPUS[start:start + 5])
        seen = CORPUS[: start + 5]
        for query in QUERIES:
            np.testing.assert_allclose(index.scores(query), rebuilt(seen).get_scores(Analyzer()(query)), atol=1e-12)


def test_removed_rows_score_as_if_rebuilt_without_them():
    index = LexicalIndex(Analyzer())
    index.add(CORPUS)
    index.remove(1)
    index.remove(8)
    kept = [d for i, d in enumerate(CORPUS) if i not in (1, 8)]
    for query in QUERIES:
        scores = index.scores(query)
        assert scores[1] == 0 and scores[8] == 0
        np.testing.assert_allclose(np.delete(scores, [1, 8]), rebuilt(kept).get_scores(Analyzer()(query)),
                                   atol=1e-12)


def test_bm25_ranking_on_a_hand_made_corpus():
    index = LexicalIndex(Analyzer())
    index.add(CORPUS)
    scores = index.scores("breast cancer gene")
    order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
    # both "breast cancer" documents first; the BRCA1 one also matches "gene"; then gene, then lung cancer
    assert order == [3, 4, 6, 8]


def test_tiny_corpus_still_ranks_matches_above_non_matches():
    """BM25Okapi gives negative scores here; our floor keeps matching documents positive."""
    index = LexicalIndex(Analyzer())
    index.add(["capital of France", "capital of Germany"])
    scores = index.scores("France capital")
    assert scores[0] > scores[1] > 0
    assert min(BM25Okapi([["capit", "franc"], ["capit", "germani"]]).get_scores(["franc", "capit"])) <= 0


def test_k1_and_b_are_query_time_parameters():
    index = LexicalIndex(Analyzer())
    index.add(CORPUS)
    expected = BM25Okapi([Analyzer()(d) for d in CORPUS], k1=0.9, b=0.4).get_scores(Analyzer()("heart risk"))
    np.testing.assert_allclose(index.scores("heart risk", k1=0.9, b=0.4), expected, atol=1e-12)
