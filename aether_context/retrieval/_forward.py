"""One text through a SentenceTransformer without `encode`'s per-call set-up.

Why: a pack embeds one short query per new user turn, on the call's critical path. `encode` spends
a tenth of its time around the forward pass (placing the model on its device, `eval()` over every
submodule, sorting the batch by length, stacking), and transformers' BERT forward spends another
fifth in Python around the same tensor ops (argument-deprecation and output-capturing wrappers, a
module call per Linear, a pooler whose output mean pooling never reads). Two shorter paths run the
same ops on the same tensors, so the vector is the same, bit for bit:

- `_lean`: for the MiniLM layout (BERT, SDPA attention, mean pooling, Normalize) the encoder's
  layers are walked here, each Linear called through its own op (the int8 one directly; the ops are
  looked up once per model), the unused pooler skipped;
- `_direct`: any model: `preprocess`, the model's forward, then encode's L2 normalisation.

That is checked, not assumed: the first text of each model goes through `encode` and the short
paths, and the model keeps the first path whose vector matches in every bit (another
sentence-transformers or transformers version, a prompt, a truncation: a path that differs, or
fails, is never used); with none, `encode` it is.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Callable

import numpy as np

__all__ = ["encode_one"]

logger = logging.getLogger(__name__)

Path = Callable[[Any, str], np.ndarray]
_CHECKED: "weakref.WeakKeyDictionary[Any, Path | None]" = weakref.WeakKeyDictionary()  # model -> its exact path
_LOCK = threading.Lock()
_LAYERS: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()  # BERT -> its layers' ops


def _encode(model: Any, text: str) -> np.ndarray:
    return np.asarray(model.encode([text], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False),
                      dtype=np.float32)


def _normalized(embedding: Any) -> np.ndarray:
    import torch

    vector = torch.nn.functional.normalize(embedding, p=2, dim=1)  # what encode(normalize_embeddings=True) applies
    return vector.cpu().numpy().astype(np.float32, copy=False)


def _direct(model: Any, text: str) -> np.ndarray:
    import torch

    with torch.inference_mode():
        features = model.preprocess([text])
        features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        return _normalized(model(features)["sentence_embedding"])


def _linear(module: Any, torch: Any, dynamic: type) -> Callable[[Any], Any]:
    """A Linear's forward as one call: dynamic int8 through its op (as its `forward` calls it), else the module."""
    if isinstance(module, dynamic) and module.version >= 4 and module._packed_params.dtype == torch.qint8:
        op, params = torch.ops.quantized.linear_dynamic.default, module._packed_params._packed_params
        return lambda x: op(x, params, True)  # reduce_range=True, float32 out (its `.to(x.dtype)` is a no-op)
    return module


def _bert(model: Any) -> Any:
    """The BERT inside a [Transformer, Pooling, Normalize] model the lean path knows; TypeError otherwise."""
    if [type(m).__name__ for m in model] != ["Transformer", "Pooling", "Normalize"]:
        raise TypeError("not the Transformer, Pooling, Normalize layout")
    bert = model[0].auto_model
    config = bert.config
    if (type(bert).__name__ != "BertModel" or config._attn_implementation != "sdpa" or config.is_decoder
            or config.chunk_size_feed_forward or bert.training or str(model.device) != "cpu"):
        raise TypeError("not an encoder-only BERT with SDPA attention in eval mode on the CPU")
    return bert


def _layers(bert: Any, torch: Any) -> tuple:
    """Per encoder layer, what the lean path calls: its attention module, head size and scaling, and each op,
    looked up once per model rather than per text (0.2-0.4 ms a question; a loaded model is never changed)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    linear = lambda module: _linear(module, torch, DynamicLinear)  # noqa: E731
    out = []
    for layer in bert.encoder.layer:
        attention, output, mid = layer.attention, layer.output, layer.intermediate
        qkv = tuple(linear(lin) for lin in (attention.self.query, attention.self.key, attention.self.value))
        out.append((attention.self, attention.self.attention_head_size, attention.self.scaling, qkv,
                    linear(attention.output.dense), attention.output.LayerNorm, linear(mid.dense),
                    mid.intermediate_act_fn, linear(output.dense), output.LayerNorm))
    return tuple(out)


def _lean(model: Any, text: str) -> np.ndarray:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bert = _bert(model)
    layers = _LAYERS.get(bert)
    if layers is None:
        layers = _LAYERS[bert] = _layers(bert, torch)
    with torch.inference_mode():
        features = model.preprocess([text])
        mask_2d = features["attention_mask"]
        h = bert.embeddings(input_ids=features["input_ids"], token_type_ids=features.get("token_type_ids"))
        mask = bert._create_attention_masks(attention_mask=mask_2d, encoder_attention_mask=None, embedding_output=h,
                                            encoder_hidden_states=None, cache=None)[0]
        for attention, size, scaling, qkv, dense, norm, up, act, down, out_norm in layers:  # BertLayer.forward,
            heads = (*h.shape[:-1], -1, size)  # its dropouts (identity in eval) left out
            q, k, v = (lin(h).view(heads).transpose(1, 2) for lin in qkv)
            a, _ = sdpa_attention_forward(attention, q, k, v, mask, dropout=0.0, scaling=scaling)
            a = norm(dense(a.reshape(*h.shape[:-1], -1).contiguous()) + h)
            h = out_norm(down(act(up(a))) + a)
        pooled = model[2](model[1]({"token_embeddings": h, "attention_mask": mask_2d}))
        return _normalized(pooled["sentence_embedding"])


def _exact_path(model: Any, text: str, expected: np.ndarray) -> "Path | None":
    """The first short path that gives `expected` (encode's vector of `text`) in every bit, or None."""
    for path in (_lean, _direct):
        try:
            if path(model, text).tobytes() == expected.tobytes():
                return path
        except Exception:  # another sentence-transformers or transformers layout: the next path
            logger.debug("one-text path %s unavailable for this model", path.__name__, exc_info=True)
    logger.info("one-text embedding keeps SentenceTransformer.encode: the short paths differ")
    return None


def encode_one(model: Any, text: str) -> np.ndarray:
    """`model.encode([text], normalize_embeddings=True)` as float32, shape (1, dim), the same bits."""
    if model not in _CHECKED:
        with _LOCK:
            expected = _encode(model, text)
            if model not in _CHECKED:
                _CHECKED[model] = _exact_path(model, text, expected)
        return expected
    path = _CHECKED[model]
    return path(model, text) if path is not None else _encode(model, text)
