"""testbed: stand up clusters of fake GPU nodes (local, docker, kubernetes) and drive them."""

from testbed.api import Testbed
from testbed.backends import BackendError, NodeInfo

__all__ = ["BackendError", "NodeInfo", "Testbed"]
