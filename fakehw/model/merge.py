"""Merging profile documents: how ``extends`` and a group's ``override`` combine with what they build on.

Rules (the same as Kubernetes' strategic merge for named lists):

- mappings merge key by key, recursively;
- lists whose items are all mappings with a ``name`` merge item by item on ``name`` (new names are appended);
- anything else in the override replaces what the base had.
"""

from __future__ import annotations

from typing import Any


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


def merge_documents(base: Any, override: Any) -> Any:
    """Return ``base`` with ``override`` merged in (neither argument is modified)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge_documents(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(override, list) and _named(base) and _named(override):
        merged = list(base)
        index = {item["name"]: i for i, item in enumerate(merged)}
        for item in override:
            if item["name"] in index:
                merged[index[item["name"]]] = merge_documents(merged[index[item["name"]]], item)
            else:
                index[item["name"]] = len(merged)
                merged.append(item)
        return merged
    return override
