"""Chaos without netem (placeholder until the impairments land)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fakehw.fabric.emulate import Ledger


def revert_recorded(ledger: Ledger) -> tuple[list[str], list[str]]:
    return [], []
