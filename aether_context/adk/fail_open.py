"""Fail open: a plugin hook that raises is logged once with its traceback and answers None.

ADK turns an exception in a plugin into the end of the run; None tells it to go on as if the
plugin had not been there (the tool result, the model's response or its error stand as they are).
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, TypeVar

logger = logging.getLogger("aether_context")

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["fails_open"]


def fails_open(hook: F) -> F:
    """Wrap a sync or async hook so that nothing it raises reaches the agent run."""
    if inspect.iscoroutinefunction(hook):
        @functools.wraps(hook)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await hook(*args, **kwargs)
            except Exception:
                logger.error("aether-context: %s failed; the run goes on without it", hook.__name__, exc_info=True)
                return None
        return guarded_async  # type: ignore[return-value]

    @functools.wraps(hook)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return hook(*args, **kwargs)
        except Exception:
            logger.error("aether-context: %s failed; the run goes on without it", hook.__name__, exc_info=True)
            return None
    return guarded  # type: ignore[return-value]
