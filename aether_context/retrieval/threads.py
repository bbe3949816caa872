"""One bound on the threads of retrieval work: BLAS (numpy's matrix products) and torch together.

Why: on a small CPU shared with other processes, BLAS and OpenMP worker threads spin against each
other; a 10K-item search took 24 ms of CPU with default BLAS threading against 3 ms with one
thread (docs/benchmarks.md, retrieval section). The bound holds only inside the block: the
caller's own thread settings are restored when the outermost block exits, so an application that
wants all cores for its own numpy or torch work keeps them. BLAS limits use `threadpoolctl` when it
is installed (no environment variables: those are read once, at library load); without it only
torch is bounded.

Usage::

    with bounded_threads(1):      # e.g. around a whole pack, or one search
        index.search("query")
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from typing import Any, Iterator

__all__ = ["bounded_threads", "blas_bounding_available"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_state: dict[str, Any] = {"depth": 0, "undo": [], "controller": None}


def _controller() -> Any | None:
    """threadpoolctl's view of the loaded BLAS libraries, built once (None without threadpoolctl)."""
    if _state["controller"] is None:
        try:
            from threadpoolctl import ThreadpoolController

            _state["controller"] = ThreadpoolController()
        except Exception:  # not installed, or an unusual platform: torch is still bounded
            logger.debug("threadpoolctl unavailable: BLAS threads are not bounded", exc_info=True)
            _state["controller"] = False
    return _state["controller"] or None


def blas_bounding_available() -> bool:
    """True when BLAS threads can be bounded (threadpoolctl installed and a BLAS found)."""
    controller = _controller()
    return controller is not None and bool(controller.select(user_api="blas").lib_controllers)


def _apply(threads: int) -> list:
    """Set the bound; returns the calls that undo it."""
    undo = []
    controller = _controller()
    if controller is not None:
        blas = controller.select(user_api="blas")
        previous = [(lib, lib.num_threads) for lib in blas.lib_controllers]
        for lib, count in previous:
            if count != threads:
                lib.set_num_threads(threads)
                undo.append(lambda lib=lib, count=count: lib.set_num_threads(count))
    torch = sys.modules.get("torch")  # never import torch just to bound it
    if torch is not None and hasattr(torch, "get_num_threads"):
        old = torch.get_num_threads()
        if old != threads:
            torch.set_num_threads(threads)
            undo.append(lambda: torch.set_num_threads(old))
    return undo


@contextlib.contextmanager
def bounded_threads(threads: int | None) -> Iterator[None]:
    """BLAS and torch limited to `threads` inside the block (None: left alone).

    Nested and concurrent blocks share one bound: the first block to enter sets it and the last to
    leave restores the previous settings. The bound is process-wide while held (BLAS and torch
    have no per-thread setting), so other threads' numpy work in that window runs bounded too.
    """
    if threads is None:
        yield
        return
    if threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    with _LOCK:
        if _state["depth"] == 0:
            _state["undo"] = _apply(threads)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                for undo in reversed(_state["undo"]):
                    undo()
                _state["undo"] = []
