"""Deprecated location of :func:`fakehw.polling.wait_until` (kept while callers move)."""

from fakehw.polling import wait_until

__all__ = ["wait_until"]
