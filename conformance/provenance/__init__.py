"""Provenance of certification runs: what was certified (by digest), by what, sealed and signed.

- :mod:`.component`: the component under test resolved to what runs, and hashed;
- :mod:`.facts`: the harness (version, source, commit, package digest) and the runner, recorded by the plugin;
- :mod:`.statement`: the in-toto statement (SLSA provenance) over every file of a run: the seal;
- :mod:`.dsse`: DSSE envelopes signed with a key the user holds, in a Sigstore bundle;
- :mod:`.keyless`: keyless Sigstore signing (GitHub Actions OIDC) and offline verification;
- :mod:`.attest`: writing a run directory (report files, seal, signature);
- :mod:`.verify`: checking a run directory as a stranger would.

docs/certification.md explains the whole; tests/conformance/test_report_tamper.py is what it refuses.
"""
