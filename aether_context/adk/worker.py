"""The pack thread, and the edge work that must neither stall nor hang the event loop.

ADK runs every callback on its event loop. The pure build of a pack and embedding run on the
process's one pack thread (`off_loop`): packers share retrievers and embedding caches (one per
retrieval settings), so builds run there one at a time, on a thread that lives as long as the
process. The CPU work on a large tool result runs beside them (`beside_packs`), so one session's
50 MB result does not hold every other session's pack. An LLM summary runs under a timeout (`summarize`), a sync
summarizer on a thread of its own so the timeout can leave it behind. Invalid Unicode from a tool
is repaired before anything hashes or stores it (`repair_unicode`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from ..compress import SummarizeFn, Summarizer
from ..content import SLICE_CHARS

__all__ = ["off_loop", "beside_packs", "pack_worker", "summarize", "repair_unicode"]


_THREADS: dict[str, ThreadPoolExecutor] = {}
_THREADS_LOCK = threading.Lock()


def _thread(name: str) -> ThreadPoolExecutor:
    """The process's one thread named `name` (`aether-<name>`), started on first use, living as long as the process."""
    with _THREADS_LOCK:
        if name not in _THREADS:
            _THREADS[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"aether-{name}")
        return _THREADS[name]


def pack_worker() -> ThreadPoolExecutor:
    """The process's one pack thread: packers share retrievers and embedding caches (one per retrieval
    settings), so all builds run there, one at a time."""
    return _thread("pack")


async def _awaited_on(executor: ThreadPoolExecutor | None, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on `executor` (None: the loop's default one), awaited from the event loop, in a copy
    of the caller's context (the call's memo: `pipeline.cache.memo_scope`)."""
    run = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, run)


async def off_loop(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on the pack thread (see `_awaited_on`)."""
    return await _awaited_on(pack_worker(), fn, *args, **kwargs)


async def beside_packs(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a thread of the loop's default executor (see `_awaited_on`): CPU work on one large
    tool result (masking, JSON, compacting) needs no retriever, and on the pack thread every other session's pack
    would wait behind it."""
    return await _awaited_on(None, fn, *args, **kwargs)


async def summarize(summarizer: "Summarizer | SummarizeFn", previous: str | None, items: "Sequence[str]", *,
                     goal: str, max_tokens: int) -> str:
    """Call a sync or async summarizer; a sync one runs on a thread, so a timeout can leave it behind."""
    call = summarizer.summarize if isinstance(summarizer, Summarizer) else summarizer
    if inspect.iscoroutinefunction(call):
        return await call(previous, list(items), goal=goal, max_tokens=max_tokens)
    result = await asyncio.to_thread(call, previous, list(items), goal=goal, max_tokens=max_tokens)
    return await result if inspect.isawaitable(result) else result


def repair_unicode(value: object) -> tuple[object, int]:
    """`value` with lone surrogates (invalid Unicode, unencodable as UTF-8) replaced by U+FFFD and
    surrogate pairs joined, and how many characters were replaced; unchanged (same object) if none."""
    if isinstance(value, str):
        if value.isascii():  # read off the string's header, without a pass over it
            return value, 0
        # a slice at a time: one search over a 50 MB result would hold the interpreter lock for a second
        if not any(_SURROGATE.search(value, i, i + SLICE_CHARS) for i in range(0, len(value), SLICE_CHARS)):
            return value, 0
        fixed = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return fixed, fixed.count("\ufffd") - value.count("\ufffd")
    if isinstance(value, (list, tuple)):
        items = [repair_unicode(v) for v in value]
        n = sum(c for _, c in items)
        return ([v for v, _ in items] if n else value), n
    if isinstance(value, dict):
        pairs = [(repair_unicode(k), repair_unicode(v)) for k, v in value.items()]
        n = sum(kc + vc for (_, kc), (_, vc) in pairs)
        return ({k: v for (k, _), (v, _) in pairs} if n else value), n
    return value, 0


_SURROGATE = re.compile("[\ud800-\udfff]")
