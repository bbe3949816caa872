"""One exception root, so callers can catch everything aether-context raises with one clause."""

from __future__ import annotations


class AetherContextError(Exception):
    """Base class of every error aether-context raises on purpose."""


class ProfileError(AetherContextError, ValueError):
    """A budget profile is malformed: the message names the key and the fix."""


class WindowError(AetherContextError, ValueError):
    """The model's context window is unknown and no profile override gives it."""


class BudgetError(AetherContextError):
    """The fixed layers do not fit the window: the step must be split or the profile changed."""


class ManifestError(AetherContextError):
    """A manifest or a stored request is missing, truncated or tampered with."""


class PackTimeout(AetherContextError):
    """A pack did not finish within the packer's `pack_timeout`: the call went out as ADK built it."""


class StoreError(AetherContextError):
    """A URI points outside the pack store, or the store cannot be read."""
