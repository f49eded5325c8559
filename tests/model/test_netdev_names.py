"""Every built-in profile names its NICs' network interfaces as udev names them on a real machine.

The expected name is built here from systemd.net-naming-scheme(7)'s path-based scheme (``ID_NET_NAME_PATH``), not
from anything in the profile loader: a two-letter prefix by link layer (``en`` Ethernet, ``ib`` InfiniBand), then
``P<domain>`` only when the PCI domain is not 0, ``p<bus>s<slot>`` in decimal, ``f<function>`` only when the device
is multi-function, and for an Ethernet port with a physical port name (mlx5's uplink: ``p<port>``, one per function)
``n<phys_port_name>``. An IPoIB interface has no physical port name. Consumers match on these names (fabric configs,
NCCL_SOCKET_IFNAME, Multus), so a name the kernel could not give is a profile bug.
"""

from __future__ import annotations

from collections import Counter

import pytest

from fakehw.model import builtin_profiles, load_profile
from fakehw.model.system import Nic


def _path_name(nic: Nic, multifunction: bool) -> str:
    address = nic.address
    name = {"ethernet": "en", "infiniband": "ib"}[nic.link_layer]
    name += f"P{address.domain}" if address.domain else ""
    name += f"p{address.bus}s{address.device}"
    name += f"f{address.function}" if multifunction else ""
    return name + (f"np{address.function}" if nic.link_layer == "ethernet" else "")


@pytest.mark.parametrize("profile", sorted(builtin_profiles()))
def test_netdev_names_follow_the_path_naming_scheme(profile: str) -> None:
    for node in load_profile(profile).nodes:
        slots = Counter((n.address.domain, n.address.bus, n.address.device) for n in node.nics)
        for nic in node.nics:
            multifunction = slots[nic.address.domain, nic.address.bus, nic.address.device] > 1
            assert nic.netdev == _path_name(nic, multifunction), (node.name, nic.name, str(nic.address))


def test_a_domain_zero_name_has_no_domain_part() -> None:
    """gh200's NIC at 0000:01:00.0 was ``enP0p1s0np0``: udev writes ``P<domain>`` only for a non-zero domain."""
    nic = load_profile("gh200").nodes[0].nics[0]
    assert (str(nic.address), nic.netdev) == ("0000:01:00.0", "enp1s0np0")
