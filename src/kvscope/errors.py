"""Typed errors. Each names the field at fault and the fix; the CLI renders them as one line, exit 2."""

from __future__ import annotations


class KvscopeError(Exception):
    """Base class: a user-facing problem with the input, rendered as one line by the CLI."""

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None) -> None:
        self.field = field
        self.fix = fix
        text = message
        if field and field not in message:
            text = f"{field}: {message}"
        if fix:
            text = f"{text} ({fix})"
        super().__init__(text)


class ConfigError(KvscopeError):
    """A model config (config.json, checkpoint dir) is missing a field, has a bad value, or is unknown."""


class CheckpointError(KvscopeError):
    """A safetensors header is corrupt, truncated or oversized."""


class FlagError(KvscopeError):
    """Impossible or contradictory engine flags (e.g. tp not dividing attention heads)."""


class LogFormatError(KvscopeError):
    """A log that cannot be read as any engine's startup log."""
