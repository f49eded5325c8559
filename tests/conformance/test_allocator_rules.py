"""The reference plugin's allocator against the ranking NVIDIA's own device plugin uses, on hand-built boards.

The expected sets are written out here, from NVIDIA's go-gpuallocator (the k8s-device-plugin's best-effort policy):
it ranks a pair of GPUs by its link, ``P2PLinkCrossCPU < P2PLinkSameCPU < P2PLinkHostBridge < P2PLinkMultiSwitch <
P2PLinkSingleSwitch < P2PLinkSameBoard < SingleNVLINKLink < TwoNVLINKLinks < ...``: any NVLink beats every PCIe
path, more links beat fewer, and among PCIe paths the one through fewer hops wins. The PCIe levels are NVML's
``nvmlGpuTopologyLevel_t`` (nvml.h: SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50). Where every set is
equally good, ``best_set`` promises the lowest indices; the greedy search (used on large domains) must keep the
promise too, so it is driven here with ``exhaustive_limit=0``.

(test_device_plugin_units.py checks the search finds *a* best set by the allocator's own score; these check the
score itself ranks sets the way NVIDIA's plugin does.)
"""

from __future__ import annotations

import pytest

from testbed.reference.device_plugin.allocator import TopologyMatrix, best_set

SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 10, 20, 30, 40, 50


def _matrix(n: int, bonds: dict[tuple[int, int], int], levels: dict[tuple[int, int], int],
            default_level: int = SYSTEM) -> TopologyMatrix:
    b = [[0] * n for _ in range(n)]
    lv = [[0 if i == j else default_level for j in range(n)] for i in range(n)]
    for (i, j), v in bonds.items():
        b[i][j] = b[j][i] = v
    for (i, j), v in levels.items():
        lv[i][j] = lv[j][i] = v
    return TopologyMatrix(tuple(map(tuple, b)), tuple(map(tuple, lv)))


PCIE_BOX = _matrix(4, {}, {(0, 1): NODE, (1, 2): SINGLE, (2, 3): HOSTBRIDGE, (0, 3): MULTIPLE})
"""Four PCIe GPUs, no NVLink: 1-2 share one switch, 0-3 two switches, 2-3 a host bridge, 0-1 a socket."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_without_nvlink_the_pair_with_fewest_pcie_hops_wins(limit: int) -> None:
    assert best_set(PCIE_BOX, [0, 1, 2, 3], 2, exhaustive_limit=limit) == (1, 2)
    assert best_set(PCIE_BOX, [0, 2, 3], 2, exhaustive_limit=limit) == (0, 3)  # MULTIPLE beats HOSTBRIDGE, SYSTEM
    assert best_set(PCIE_BOX, [0, 1, 3], 2, must=[1], exhaustive_limit=limit) == (0, 1)  # NODE beats SYSTEM


NVLINK_ACROSS_SOCKETS = _matrix(4, {(0, 2): 2, (1, 3): 12}, {(0, 1): SINGLE, (2, 3): SINGLE})
"""0-1 and 2-3 share a PCIe switch but have no NVLink; 0-2 have two NVLinks and 1-3 twelve, across sockets."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_any_nvlink_beats_the_closest_pcie_path_and_more_links_beat_fewer(limit: int) -> None:
    assert best_set(NVLINK_ACROSS_SOCKETS, [0, 1, 2], 2, must=[0], exhaustive_limit=limit) == (0, 2)
    assert best_set(NVLINK_ACROSS_SOCKETS, [0, 1, 2, 3], 2, exhaustive_limit=limit) == (1, 3)


UNIFORM = _matrix(8, {(i, j): 18 for i in range(8) for j in range(i + 1, 8)}, {}, default_level=SYSTEM)
"""Eight GPUs all bonded alike (one NVSwitch domain): every set of a size is equally good."""


@pytest.mark.parametrize("limit", [20_000, 0])
@pytest.mark.parametrize(("candidates", "size", "expected"), [
    ([0, 1, 2, 3, 4, 5, 6, 7], 1, (0,)),
    ([7, 6, 5, 4, 3, 2, 1, 0], 1, (0,)),
    ([3, 5, 7], 1, (3,)),
    ([0, 1, 2, 3, 4, 5, 6, 7], 2, (0, 1)),
    ([6, 2, 4, 7], 2, (2, 4)),
    ([0, 1, 2, 3, 4, 5, 6, 7], 4, (0, 1, 2, 3)),
])
def test_ties_go_to_the_lowest_indices(limit: int, candidates: list[int], size: int,
                                       expected: tuple[int, ...]) -> None:
    assert best_set(UNIFORM, candidates, size, exhaustive_limit=limit) == expected


@pytest.mark.parametrize("limit", [20_000, 0])
def test_nothing_wanted_gives_nothing(limit: int) -> None:
    assert best_set(UNIFORM, list(range(8)), 0, exhaustive_limit=limit) == ()
    assert best_set(UNIFORM, list(range(8)), 2, must=[6, 3], exhaustive_limit=limit) == (3, 6)


TWO_BEST_PAIRS = _matrix(4, {(0, 3): 12, (1, 2): 12}, {})
"""0-3 and 1-2 both have twelve NVLinks, every other pair none: two equally good pairs."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_of_two_equal_pairs_the_one_with_the_lowest_index_wins(limit: int) -> None:
    assert best_set(TWO_BEST_PAIRS, [0, 1, 2, 3], 2, exhaustive_limit=limit) == (0, 3)


TRIANGLE_BEHIND_A_PAIR = _matrix(4, {(0, 1): 10, (1, 2): 6, (1, 3): 6, (2, 3): 6}, {})
"""The best pair (0-1, 10 links) is not in the best triple: 1-2-3 has 18 links, 0-1-2 and 0-1-3 have 16."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_the_best_set_need_not_contain_the_best_pair(limit: int) -> None:
    assert best_set(TRIANGLE_BEHIND_A_PAIR, [0, 1, 2, 3], 3, exhaustive_limit=limit) == (1, 2, 3)


def test_too_few_devices_is_refused_naming_how_many_there_are() -> None:
    """Two candidates and one must-include device cannot make four: the error says 4 wanted, 3 available."""
    with pytest.raises(ValueError, match=r"^4 devices wanted, only 3 available$"):
        best_set(UNIFORM, [0, 1], 4, must=[5])
    with pytest.raises(ValueError, match=r"^3 must-include devices exceed the allocation size 2$"):
        best_set(UNIFORM, [0, 1], 2, must=[5, 6, 7])


TWO_TRIANGLES = _matrix(6, {(0, 1): 10, (0, 2): 1, (1, 2): 1, (3, 4): 5, (3, 5): 5, (4, 5): 5}, {})
"""0-1-2 holds the best pair (10 links) but 12 links in all; 3-4-5 has five links on every pair, 15 in all."""


def test_a_search_as_large_as_the_limit_is_still_exhaustive() -> None:
    """``exhaustive_limit`` is the largest number of candidate sets searched exhaustively (its documentation), so
    3 of 6 GPUs (20 sets) with a limit of 20 are all looked at: the triangle with the most links (3-4-5, 15) wins,
    where a search that grows from the best pair (0-1) stops at 0-1-2 (12 links)."""
    assert best_set(TWO_TRIANGLES, list(range(6)), 3, exhaustive_limit=20) == (3, 4, 5)


SWAPS_IN_TWO_ROUNDS = _matrix(5, {(0, 2): 4, (0, 3): 4, (0, 4): 6, (1, 2): 6, (1, 3): 6, (1, 4): 2, (2, 3): 6,
                                  (3, 4): 1}, {})
"""1-2-3 is a triangle of six links a pair (18). Every set of three with 0 or 4 has fewer: 0-2-3 14, 0-3-4 11,
0-2-4 10, 1-2-4 8, 0-1-4 8, ... by adding up the pairs."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_swaps_go_on_until_none_helps(limit: int) -> None:
    """The greedy search starts from the lowest of the equally good pairs (0-4), so it reaches 1-2-3 only by
    swapping twice (4 for 2, then 0 for 1): go-gpuallocator's best set is the one with the most links, wherever
    the search starts."""
    assert best_set(SWAPS_IN_TWO_ROUNDS, list(range(5)), 3, exhaustive_limit=limit) == (1, 2, 3)


GAINS_CHANGE = _matrix(6, {(0, 1): 2, (0, 3): 4, (0, 4): 12, (0, 5): 2, (1, 3): 2, (1, 4): 1, (1, 5): 4, (2, 3): 6,
                           (2, 4): 1, (2, 5): 12, (3, 5): 4, (4, 5): 4}, {})
"""0-2-4-5 holds 12 + 12 + 4 + 2 + 1 = 31 links, more than any other four (1-2-3-5 has 28, 0-3-4-5 26, ...)."""


@pytest.mark.parametrize("limit", [20_000, 0])
def test_each_pick_counts_its_links_to_every_gpu_already_chosen(limit: int) -> None:
    """The greedy search adds, one at a time, the GPU with the most links to the set so far: after 0-4 it must
    count links to 0 and 4 and then to the GPU it just added, or it grows towards the wrong four."""
    assert best_set(GAINS_CHANGE, list(range(6)), 4, exhaustive_limit=limit) == (0, 2, 4, 5)


def _dgx_h100() -> TopologyMatrix:
    """The DGX H100's matrices as the plugin reads them from NVML (the fake's, derived from the profile)."""
    from fakehw.model import load_profile

    topo = load_profile("dgx-h100").topology.nodes["dgx-h100-0"]
    return TopologyMatrix(topo.nvlinks, tuple(tuple(int(level) for level in row) for row in topo.levels))


@pytest.mark.parametrize("limit", [20_000, 0])
def test_on_a_dgx_h100_equal_nvlink_leaves_the_socket_to_decide(limit: int) -> None:
    """reference/hardware.md: a DGX H100's eight GPUs are NV18 to one another (four NVSwitch chips), GPU0-3 on
    NUMA node 0 and GPU4-7 on node 1 (two Xeon 8480C). With every NVLink count equal, go-gpuallocator's next
    criterion ranks P2PLinkSameCPU above P2PLinkCrossCPU: four GPUs are one socket's, a pair stays on a socket
    (lowest indices on ties), and a must-include GPU takes its partner from its own socket."""
    m = _dgx_h100()
    assert best_set(m, list(range(8)), 4, exhaustive_limit=limit) == (0, 1, 2, 3)
    assert best_set(m, [0, 1, 4, 5, 6, 7], 4, exhaustive_limit=limit) == (4, 5, 6, 7)
    assert best_set(m, [3, 4, 5], 2, exhaustive_limit=limit) == (4, 5)
    assert best_set(m, list(range(8)), 2, must=[6], exhaustive_limit=limit) == (4, 6)
    assert best_set(m, [0, 1, 2, 5, 6], 3, must=[7], exhaustive_limit=limit) == (5, 6, 7)
    assert m.score_parts((0, 1, 2, 3)) == (6 * 18, 6 * NODE)
