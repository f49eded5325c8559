"""The hardware model: profiles in, an immutable :class:`System` and its derived topology out.

Typical use::

    from fakehw.model import load_profile
    system = load_profile("dgx-h100")
    topo = system.topology.nodes[system.nodes[0].name]
    topo.nvlinks[0][1]   # 18
"""

from fakehw.model.errors import Problem, ProfileError
from fakehw.model.loader import builtin_profiles, load_profile, load_spec
from fakehw.model.spec import ProfileSpec
from fakehw.model.system import Gpu, Node, System, TopologyLevel
from fakehw.model.topology import NodeTopology, P2PCapability, P2PStatus, SystemTopology

__all__ = [
    "Gpu",
    "Node",
    "NodeTopology",
    "P2PCapability",
    "P2PStatus",
    "Problem",
    "ProfileError",
    "ProfileSpec",
    "System",
    "SystemTopology",
    "TopologyLevel",
    "builtin_profiles",
    "load_profile",
    "load_spec",
]
