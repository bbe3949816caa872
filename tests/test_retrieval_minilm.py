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
    assert retriever.wait_ready()  # no deadline: a loaded machine may take long to load the model
    assert embedder.embed(["the model is already loaded"]).shape == (1, 384)
    assert torch.get_num_threads() == before
    from aether_context.retrieval import bounded_threads  # the mechanism encode and search run under
    with bounded_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_model_load_is_silent_and_shared(capfd):
    """No progress bar in the app's output; one model per setting."""
    from aether_context.retrieval import default_model_path

    capfd.readouterr()
    model = load_sentence_transformer(default_model_path(), max_seq_length=64)
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and "%|" not in err
    assert model is load_sentence_transformer(default_model_path(), max_seq_length=64)
    embedder = SentenceTransformerEmbedder(max_seq_length=64)
    assert embedder.available() and embedder.ready()


def test_a_vector_depends_on_its_text_not_on_its_batch():
    """The cache keeps whichever call embedded a text first (a search in one call, an added item in
    another), so a text's vector must be the same bits alone and beside shorter, longer, equal-length
    and repeated companions. Each text goes through encode alone, so this holds on any CPU."""
    from aether_context.retrieval import EmbeddingCache

    text = "I want to change my flight to tomorrow morning, reservation ABC123 please"
    shorter, longer = ["yes", "ok thanks"], ["Could you also check my baggage allowance " * 6, "ünïcödé 日本語 ✓ " * 20]
    same_length = ["I want to change my flight to Friday evening, reservation ABC456 please",
                   "I want to change my hotel to tomorrow morning, booking ABC123 please"]
    embedder = SentenceTransformerEmbedder(max_seq_length=128, threads=1)
    alone = embedder.embed([text])[0].tobytes()
    model = load_sentence_transformer(embedder.model_path, max_seq_length=128)
    encoded = model.encode([text], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    np.testing.assert_allclose(np.frombuffer(alone, dtype=np.float32), encoded[0], atol=1e-6)  # encode's vector
    for batch in ([text, *shorter], [*longer, text], [*shorter, text, *longer, *same_length],
                  [text, *same_length], [*same_length, text] * 3):
        got = embedder.embed(batch)
        assert got.shape == (len(batch), 384) and got.dtype == np.float32
        for row in (i for i, t in enumerate(batch) if t == text):
            assert got[row].tobytes() == alone, batch
    cache = EmbeddingCache(embedder)
    cache.embed([*longer, text, *shorter])
    assert cache.embed([text])[0].tobytes() == alone
