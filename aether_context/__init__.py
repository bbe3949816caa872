"""aether-context."""
