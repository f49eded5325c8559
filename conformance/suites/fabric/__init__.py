"""Fabric config conformance: static requirements decided by the linter, dynamic ones measured on the fabric."""
