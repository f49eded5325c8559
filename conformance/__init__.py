"""Conformance suites, the pytest plugin that runs them and the certification report they produce."""

RESULTS_SCHEMA = "fakehw.conformance.results/v1"
"""Schema id of the results file: written by the pytest plugin after every test, read by the report builder."""
