"""Runtime fabric commands (``up``, ``down``, ``probe``, ``fuzz``...): registered by :mod:`fakehw.fabric.cli`."""

from __future__ import annotations

from typing import Any


def register(fsub: Any) -> None:
    """Add the runtime subcommands (filled in as the emulation lands)."""
