"""Reference implementations of what the conformance suites certify (they prove the suites are passable)."""
