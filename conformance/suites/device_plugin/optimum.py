"""The optimum a preferred allocation is judged against, computed from the model (never from a plugin's allocator).

:class:`ModelTopology` holds a node's GPUs with the model's NVLink bonds and PCIe levels. A set of GPUs scores
(sum of NVLink links over its pairs, minus the sum of PCIe levels over its pairs), bigger is better;
:meth:`ModelTopology.optimum` finds the best set by exhaustive search. :meth:`ModelTopology.partition_choice`
states the other rule a plugin may follow with must-include devices, NVIDIA's best-effort policy
(go-gpuallocator): divide all available GPUs into sets of the size asked for, maximise the total score, and
answer the best set of that division holding the must-include devices.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from fakehw.model.system import Node, System


@dataclass(frozen=True)
class ModelTopology:
    """The node's GPUs with the model's NVLink bonds and PCIe levels (index = NVML index)."""

    names: tuple[str, ...]
    bonds: tuple[tuple[int, ...], ...]
    levels: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, system: System, node: Node) -> ModelTopology:
        topo = system.topology.nodes[node.name]
        return cls(tuple(g.name for g in node.gpus), tuple(tuple(int(x) for x in r) for r in topo.nvlinks),
                   tuple(tuple(int(x) for x in r) for r in topo.levels))

    def index(self, name: str) -> int:
        return self.names.index(name)

    def score(self, names: Sequence[str]) -> tuple[int, int]:
        """(sum of NVLink links over pairs, minus the sum of PCIe levels over pairs): bigger is better."""
        idx = [self.index(n) for n in names]
        pairs = list(itertools.combinations(idx, 2))
        return sum(self.bonds[a][b] for a, b in pairs), -sum(self.levels[a][b] for a, b in pairs)

    def optimum(self, available: Sequence[str], size: int, must: Sequence[str] = ()) -> tuple[tuple[int, int],
                                                                                             tuple[str, ...]]:
        """Best score of a ``size``-set from ``available`` containing ``must``, and one set that reaches it."""
        rest = [a for a in available if a not in must]
        best: tuple[tuple[int, int], tuple[str, ...]] | None = None
        for combo in itertools.combinations(rest, size - len(must)):
            members = (*must, *combo)
            s = self.score(members)
            if best is None or s > best[0]:
                best = (s, members)
        if best is None:
            raise ValueError(f"no {size}-set from {len(available)} available GPUs")
        return best

    def partition_choice(self, available: Sequence[str], size: int, must: Sequence[str],
                         chosen: Sequence[str]) -> tuple[tuple[str, ...], ...] | None:
        """A best division of ``available`` into ``size``-sets (one set padded when the count does not divide)
        with one full set holding ``must``, in which ``chosen`` is that set and scores best among the full sets
        holding ``must``: the rule of NVIDIA's best-effort policy (go-gpuallocator), computed here by exhaustive
        search. None when there is no such division (or more than :data:`PARTITION_LIMIT` GPUs to divide)."""
        if len(available) > PARTITION_LIMIT or size < 2:
            return None
        want = frozenset(chosen)
        must_set = frozenset(must)
        best: tuple[int, int] | None = None
        hits: list[tuple[tuple[str, ...], ...]] = []
        for partition in _partitions(list(available), size):
            holders = [s for s in partition if len(s) == size and must_set <= set(s)]
            if not holders:
                continue
            total = self._sum(partition)
            if best is None or total > best:
                best, hits = total, []
            if total == best:
                top = max(self.score(h) for h in holders)
                if any(frozenset(h) == want and self.score(h) == top for h in holders):
                    hits.append(partition)
        return hits[0] if hits else None

    def _sum(self, partition: Sequence[Sequence[str]]) -> tuple[int, int]:
        scores = [self.score(s) for s in partition]
        return sum(a for a, _ in scores), sum(b for _, b in scores)


PARTITION_LIMIT = 12
"""Most GPUs whose divisions into sets are searched exhaustively (12 GPUs in pairs: 10,395 divisions)."""


def _partitions(items: list[str], size: int) -> Iterator[tuple[tuple[str, ...], ...]]:
    """Every division of ``items`` into sets of ``size``, plus one smaller set when the count does not divide
    (NVIDIA pads the list and allows the padding in one set only); each division once."""
    padding = (-len(items)) % size

    def divide(rest: list[str], pad: int) -> Iterator[tuple[tuple[str, ...], ...]]:
        if not rest:
            yield ()
            return
        head, tail = rest[0], rest[1:]
        for real in {size - 1, size - 1 - pad} if pad else {size - 1}:
            if real < 0 or real > len(tail):
                continue
            for combo in itertools.combinations(tail, real):
                group = (head, *combo)
                left = [x for x in tail if x not in combo]
                for more in divide(left, pad if real == size - 1 else 0):
                    yield (group, *more)

    yield from divide(items, padding)
