"""Reading public ``nvml.h`` headers: the link symbols a header declares (used by the symbol-table generator and
by the tests that check the library against the newest header). Standard library only."""

from __future__ import annotations

import re

_DECL = re.compile(r"DECLDIR\s+(?:char\s*\*\s*)?(nvml\w+)\s*\(")
_DEFINES = re.compile(r"#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS(.*?)#endif", re.S)
_ALIAS = re.compile(r"#define\s+(nvml\w+)\s+(nvml\w+)")


def versioned_names(text: str) -> dict[str, str]:
    """The header's ``#define nvmlX nvmlX_vN`` mapping of unversioned names to the versions it links to."""
    block = _DEFINES.search(text)
    return dict(_ALIAS.findall(block.group(1))) if block else {}


def link_symbols(text: str) -> set[str]:
    """Symbols a program built against the header links to: every declared function through the header's
    ``#define nvmlX nvmlX_vN`` mapping (410 in nvidia-nvml-dev 13.4.92's nvml.h)."""
    mapping = versioned_names(text)
    return {mapping.get(n, n) for n in _DECL.findall(text)}


def declared_symbols(text: str) -> set[str]:
    """Every symbol the header declares or links to, including the unversioned names it still declares for
    ``NVML_NO_UNVERSIONED_FUNC_DEFS`` users (a library exports both)."""
    return set(_DECL.findall(text)) | link_symbols(text)
