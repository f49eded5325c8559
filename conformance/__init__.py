"""Conformance suites, the pytest plugin that runs them and the certification report they produce."""

from __future__ import annotations

from typing import NoReturn

import pytest

RESULTS_SCHEMA = "fakehw.conformance.results/v1"
"""Schema id of the results file: written by the pytest plugin after every test, read by the report builder."""


class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """Raised by :func:`not_applicable`: the requirement does not apply to this component or profile.

    It is a kind of skip to pytest (the test stops, nothing fails), but the conformance plugin records the
    outcome as ``not-applicable`` with its reason, so a report can tell "nothing to check here, and why" apart
    from both a pass and a skip (a skip of a required check fails certification; not-applicable does not).
    """


def not_applicable(reason: str) -> NoReturn:
    """End the current check as *not applicable*, saying why (shown in every report format).

    Use it only where the requirement genuinely cannot apply (no memory pools on the profile, the component does
    not implement an optional extension, one GPU node where isolation needs two), never to hide a failure.
    """
    if not reason.strip():
        raise ValueError("not_applicable needs a reason a reader of the report can check")
    raise NotApplicable(msg=reason, allow_module_level=False)
