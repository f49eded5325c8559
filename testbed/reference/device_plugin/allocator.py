"""Choosing the GPUs of a preferred allocation: the set with the most NVLink bandwidth between its members.

Pure functions over two matrices the plugin reads from NVML at start (:mod:`.inventory`): NVLink bonds (links
between two GPUs, directly or through shared switches) and PCIe levels (``nvmlGpuTopologyLevel_t``: 10 = one
switch ... 50 = across sockets). A set scores, lexicographically, the sum over its pairs of NVLink links (more is
better), then the sum over its pairs of PCIe levels (less is better): the same order the conformance suite uses
to compute the optimum from the model, so "fewest hops" and "same NVLink domain" fall out of the bonds.

Small searches are exhaustive (a node has at most a few dozen GPUs and requests are small); large ones (a
72-GPU NVLink domain) are greedy from the best pair, then improved by single swaps until no swap helps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

EXHAUSTIVE_LIMIT = 20_000
"""Largest number of candidate sets searched exhaustively."""
LEVEL_WEIGHT = 1
BOND_WEIGHT = 10_000_000
"""One NVLink link outweighs any possible sum of PCIe levels (pairs x 50 stays far below this)."""


@dataclass(frozen=True)
class TopologyMatrix:
    """Pairwise NVLink links and PCIe levels of GPUs 0..n-1."""

    bonds: tuple[tuple[int, ...], ...]
    levels: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return len(self.bonds)

    def pair(self, a: int, b: int) -> int:
        """Score of one pair, as one integer: links first, then PCIe closeness."""
        return self.bonds[a][b] * BOND_WEIGHT - self.levels[a][b] * LEVEL_WEIGHT

    def score(self, members: Sequence[int]) -> int:
        return sum(self.pair(a, b) for a, b in itertools.combinations(members, 2))

    def score_parts(self, members: Sequence[int]) -> tuple[int, int]:
        """(sum of NVLink links, sum of PCIe levels) over the pairs of ``members``."""
        pairs = list(itertools.combinations(members, 2))
        return sum(self.bonds[a][b] for a, b in pairs), sum(self.levels[a][b] for a, b in pairs)


def best_set(matrix: TopologyMatrix, candidates: Sequence[int], size: int,
             must: Sequence[int] = (), exhaustive_limit: int = EXHAUSTIVE_LIMIT) -> tuple[int, ...]:
    """The best ``size`` GPUs from ``candidates`` that include all of ``must`` (ties: lower indices first).

    ``must`` members count even if they are not among ``candidates``. Raises ValueError when it cannot be done.
    """
    must = list(dict.fromkeys(must))
    rest = [c for c in dict.fromkeys(candidates) if c not in must]
    need = size - len(must)
    if need < 0:
        raise ValueError(f"{len(must)} must-include devices exceed the allocation size {size}")
    if need > len(rest):
        raise ValueError(f"{size} devices wanted, only {len(must) + len(rest)} available")
    if need == 0:
        return tuple(sorted(must))
    rest.sort()
    if math.comb(len(rest), need) <= exhaustive_limit:
        return _exhaustive(matrix, rest, need, must)
    return _greedy(matrix, rest, need, must)


def _exhaustive(matrix: TopologyMatrix, rest: list[int], need: int, must: list[int]) -> tuple[int, ...]:
    base = matrix.score(must)
    best: tuple[int, ...] | None = None
    best_score = 0
    for combo in itertools.combinations(rest, need):
        s = base + sum(matrix.pair(m, c) for m in must for c in combo) + matrix.score(combo)
        if best is None or s > best_score:
            best, best_score = combo, s
    assert best is not None
    return tuple(sorted((*must, *best)))


def _greedy(matrix: TopologyMatrix, rest: list[int], need: int, must: list[int]) -> tuple[int, ...]:
    chosen = list(must)
    pool = list(rest)
    if not chosen:
        # Seed with the best pair (or the first GPU when one is wanted).
        if need == 1:
            return (pool[0],)
        a, b = max(itertools.combinations(pool, 2), key=lambda p: (matrix.pair(*p), -p[0], -p[1]))
        chosen = [a, b]
        pool = [c for c in pool if c not in (a, b)]
    gain = {c: sum(matrix.pair(c, m) for m in chosen) for c in pool}
    while len(chosen) < len(must) + need:
        pick = max(pool, key=lambda c: (gain[c], -c))
        chosen.append(pick)
        pool.remove(pick)
        del gain[pick]
        for c in pool:
            gain[c] += matrix.pair(c, pick)
    # Single swaps of a free member for an outside GPU while that improves the score.
    free = [c for c in chosen if c not in must]
    improved = True
    while improved:
        improved = False
        for inside in list(free):
            others = [m for m in chosen if m != inside]
            loss = sum(matrix.pair(inside, m) for m in others)
            best_out, best_gain = None, loss
            for out in pool:
                g = sum(matrix.pair(out, m) for m in others)
                if g > best_gain:
                    best_out, best_gain = out, g
            if best_out is not None:
                chosen[chosen.index(inside)] = best_out
                free[free.index(inside)] = best_out
                pool.remove(best_out)
                pool.append(inside)
                improved = True
    return tuple(sorted(chosen))
