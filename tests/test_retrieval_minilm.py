"""The one test that loads the real offline MiniLM: lazily, once per process, offline."""

from __future__ import annotations

import os

import numpy as np

from aether_context.retrieval import Document, HybridIndex, RetrievalSettings, SentenceTransformerEmbedder
from aether_context.retrieval.embeddings import load_sentence_transformer


def test_default_index_uses_the_offline_minilm_once_per_process():
    index = HybridIndex(RetrievalSettings())
    embedder = index.embedder
    assert isinstance(embedder, SentenceTransformerEmbedder) and embedder.model is None
    index.add([Document("a", "A cat is sleeping on the sofa.", "memory"),
               Document("b", "Quarterly revenue grew by eight percent.", "memory"),
               Document("c", "The kitten naps on the couch.", "memory")])
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    vectors = embedder.embed(["A cat is sleeping on the sofa.", "The kitten naps on the couch."])
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    result = index.search("a young cat resting on a couch", k=2)
    assert set(result.ids) == {"a", "c"}  # paraphrases with no shared content word still rank first
    assert result.signals["similarity"] > 0.5 and result.signals["retrieval_hit_rate"] == 1.0
    again = load_sentence_transformer(embedder.model_path)
    assert again is load_sentence_transformer(embedder.model_path)


def test_embedding_threads_apply_while_encoding_and_are_restored():
    """A profile's `embedding_threads` must not leak into the host process's torch settings."""
    import torch

    from aether_context.pipeline.retrieve import Retriever
    from aether_context.profile import load_profile

    before = torch.get_num_threads()
    retriever = Retriever(load_profile("default").retrieval)
    embedder = retriever.cache.embedder
    assert isinstance(embedder, SentenceTransformerEmbedder) and embedder.threads == 1
    assert retriever.wait_ready(timeout=120)
    assert embedder.embed(["the model is already loaded"]).shape == (1, 384)
    assert torch.get_num_threads() == before
    from aether_context.retrieval import bounded_threads  # the mechanism encode and search run under
    with bounded_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_model_load_is_silent_and_shared(capfd):
    """No progress bar and no torch quantisation warning in the app's output; one model per setting."""
    import warnings

    from aether_context.retrieval import default_model_path

    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_sentence_transformer(default_model_path(), max_seq_length=64, quantize=True)
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and "%|" not in err
    assert not [w for w in caught if "quantiz" in str(w.message).lower()]
    assert model is load_sentence_transformer(default_model_path(), max_seq_length=64, quantize=True)
    embedder = SentenceTransformerEmbedder(max_seq_length=64, quantize=True)
    assert embedder.available() and embedder.ready()


def test_one_text_embedding_is_encode_bit_for_bit():
    """A query skips encode's set-up (`retrieval/_forward.py`) and must still get encode's exact vector:
    rankings, and so packs, are the same with it and without it."""
    from aether_context.retrieval import bounded_threads, default_model_path
    import random

    from aether_context.retrieval._forward import _CHECKED, _direct, _lean, encode_one

    texts = ["", "yes", "I want to change my flight to tomorrow morning, reservation ABC123 please",
             "ünïcödé 日本語 ✓ — can I get a refund?", "word " * 400]  # the last is cut at max_seq_length
    rng = random.Random(5)  # and texts of every length up to the cut, words, ids, numbers and punctuation
    vocabulary = ["flight", "ABC123", "refund", "the", "?", "mia_li_3668", "2024-05-01", "{'id': 7}", "é", "\n", "42"]
    texts += [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 140))) for _ in range(40)]
    for quantize in (False, True):
        model = load_sentence_transformer(default_model_path(), max_seq_length=128, quantize=quantize)
        with bounded_threads(1):
            for text in texts:
                expected = model.encode([text], normalize_embeddings=True, convert_to_numpy=True,
                                        show_progress_bar=False)
                got = encode_one(model, text)
                assert got.dtype == np.float32 and got.shape == expected.shape
                assert got.tobytes() == np.asarray(expected, dtype=np.float32).tobytes()
                assert _direct(model, text).tobytes() == got.tobytes()  # the other short path agrees too
        assert _CHECKED[model] is _lean  # MiniLM's own layers were walked after the first text


def test_one_text_embedding_keeps_encode_when_the_short_paths_differ():
    """A model whose short paths do not give encode's bits (here: encode adds a prompt) keeps encode."""
    from aether_context.retrieval import default_model_path
    from aether_context.retrieval._forward import _CHECKED, encode_one
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(default_model_path(), device="cpu", prompts={"query": "query: "},
                                default_prompt_name="query")
    expected = model.encode(["where is my bag"], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert encode_one(model, "where is my bag").tobytes() == expected.tobytes()
    assert _CHECKED[model] is None
    assert encode_one(model, "where is my bag").tobytes() == expected.tobytes()


def test_a_vector_depends_on_its_text_not_on_its_batch():
    """The cache keeps whichever call embedded a text first (the work ahead in one batch, the pack in
    another), so a text's vector must be the same bits alone and beside shorter, longer, equal-length
    and repeated companions, in float32 and in int8 (which scales activations over a batch)."""
    from aether_context.retrieval import EmbeddingCache
    from aether_context.retrieval._batches import exact_groups

    text = "I want to change my flight to tomorrow morning, reservation ABC123 please"
    shorter, longer = ["yes", "ok thanks"], ["Could you also check my baggage allowance " * 6, "ünïcödé 日本語 ✓ " * 20]
    same_length = ["I want to change my flight to Friday evening, reservation ABC456 please",  # 17 tokens each
                   "I want to change my hotel to tomorrow morning, booking ABC123 please"]
    for quantize in (False, True):
        embedder = SentenceTransformerEmbedder(max_seq_length=128, quantize=quantize, threads=1)
        alone = embedder.embed([text])[0].tobytes()
        model = load_sentence_transformer(embedder.model_path, max_seq_length=128, quantize=quantize)
        batches = exact_groups(model, [text, *same_length], batch_size=4, quantized=quantize)
        assert batches == ([[0], [1], [2]] if quantize else [[0, 1, 2]])  # float32 batches equal lengths
        for batch in ([text, *shorter], [*longer, text], [*shorter, text, *longer, *same_length],
                      [text, *same_length], [*same_length, text] * 3):
            got = embedder.embed(batch)
            assert got.shape == (len(batch), 384) and got.dtype == np.float32
            for row in (i for i, t in enumerate(batch) if t == text):
                assert got[row].tobytes() == alone, (quantize, batch)
        cache = EmbeddingCache(embedder)
        cache.embed([*longer, text, *shorter])
        assert cache.embed([text])[0].tobytes() == alone
