"""One text through a SentenceTransformer without `encode`'s per-call set-up.

Why: a pack embeds one short query per new user turn, and for one text `encode` spends a tenth of
its time around the forward pass (placing the model on its device, `eval()` over every submodule,
sorting the batch by length, stacking). Here the same calls `encode` makes for a batch of one run
directly: `preprocess`, the model's forward under `inference_mode`, then the same L2 normalisation
`encode(normalize_embeddings=True)` applies, so the vector is the same, bit for bit. That is
checked, not assumed: the first text of each model goes both ways, and a model whose two vectors
differ in any bit (another sentence-transformers version, a prompt, a truncation) keeps `encode`.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["encode_one"]

logger = logging.getLogger(__name__)

_CHECKED: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()  # model -> the direct path is exact
_LOCK = threading.Lock()


def _encode(model: Any, text: str) -> np.ndarray:
    return np.asarray(model.encode([text], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False),
                      dtype=np.float32)


def _direct(model: Any, text: str) -> np.ndarray:
    import torch

    with torch.inference_mode():
        features = model.preprocess([text])
        features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        vector = torch.nn.functional.normalize(model(features)["sentence_embedding"], p=2, dim=1)
        return vector.cpu().numpy().astype(np.float32, copy=False)


def encode_one(model: Any, text: str) -> np.ndarray:
    """`model.encode([text], normalize_embeddings=True)` as float32, shape (1, dim), the same bits."""
    exact = _CHECKED.get(model)
    if exact is None:
        with _LOCK:
            expected = _encode(model, text)
            try:
                exact = _direct(model, text).tobytes() == expected.tobytes()
            except Exception:  # another sentence-transformers layout: encode it is
                logger.debug("direct forward unavailable for this model", exc_info=True)
                exact = False
            if not exact:
                logger.info("one-text embedding keeps SentenceTransformer.encode: the direct forward differs")
            _CHECKED[model] = exact
        return expected
    return _direct(model, text) if exact else _encode(model, text)
