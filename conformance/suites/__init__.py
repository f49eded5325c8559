"""Conformance suites, one package per target kind (run through ``conformance run`` or pytest)."""
