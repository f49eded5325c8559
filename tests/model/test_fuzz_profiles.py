"""Random mutations of valid profiles never produce anything but a valid System or a ProfileError.

Two kinds of mutation: on the parsed document (delete, replace with a value of another type or size, duplicate a
list item, add an unknown key) and on the YAML text (cut, insert junk, duplicate a line, truncate). CI runs
1,000 examples of each (``HYPOTHESIS_PROFILE=ci``).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fakehw.model import ProfileError, System, builtin_profiles, load_profile

TEXTS = {name: path.read_text() for name, path in builtin_profiles().items()}
DOCS = {name: yaml.safe_load(text) for name, text in TEXTS.items()}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.sampled_from([2**31, 2**63, 2**64, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["gpu*", "sw*", "nvsw0", "hb0", "0000:1b:00.0", "80GiB", "cxlhb0.rp0", "h100-sxm5-80gb", "", "*"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6),
                                                                                         inner, max_size=3),
                      max_leaves=6)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for item in path[:-1]:
        doc = doc[item]
    return doc


@st.composite
def mutated_documents(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(DOCS)))
    doc = copy.deepcopy(DOCS[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        key = path[-1]
        op = draw(st.sampled_from(["delete", "replace", "duplicate", "unknown-key"]))
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(values)
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif isinstance(parent[key], dict):
            parent[key][draw(st.text(min_size=1, max_size=8))] = draw(scalars)
    return name, yaml.safe_dump(doc, sort_keys=False)


@st.composite
def mutated_texts(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(TEXTS)))
    text = TEXTS[name]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["cut", "insert", "dup-line", "truncate"]))
        at = draw(st.integers(0, len(text)))
        if op == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif op == "insert":
            text = text[:at] + draw(st.text(alphabet=st.sampled_from(list(":-[]{}&*!|>'\"#%@`, \n\t0a")),
                                            max_size=8)) + text[at:]
        elif op == "dup-line":
            lines = text.splitlines(keepends=True)
            i = draw(st.integers(0, max(0, len(lines) - 1)))
            text = "".join(lines[: i + 1] + lines[i:])
        else:
            text = text[:at]
    return name, text


def _load_or_refuse(text: str) -> None:
    try:
        system = load_profile("fuzzed.yaml", text=text)
    except ProfileError as exc:
        assert exc.problems and all(p.message for p in exc.problems)
        assert str(exc).startswith("fuzzed.yaml")
        return
    assert isinstance(system, System)
    _ = system.topology  # deriving must not fail on anything that validated


@given(mutated_documents())
def test_mutated_documents_load_or_are_refused(case: tuple[str, str]) -> None:
    _load_or_refuse(case[1])


@given(mutated_texts())
def test_mutated_texts_load_or_are_refused(case: tuple[str, str]) -> None:
    _load_or_refuse(case[1])
