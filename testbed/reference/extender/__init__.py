"""The reference scheduler extender: NVLink-, memory-pool- and tenant-aware, gang booking by NVLink domain.

Run it next to a cluster API (the harness serves one; see docs/scheduler.md)::

    python -m testbed.reference.extender --port 8888 --api http://127.0.0.1:PORT

It proves the scheduler suite is passable and is a template for writing one; ``--mutant NAME`` runs one of the
deliberately broken variants (testbed/reference/extender/mutants.py) that the suite must catch.
"""
