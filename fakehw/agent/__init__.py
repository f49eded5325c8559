"""The node agent: owns runtime state of fake nodes, renders their outputs, serves the control API."""

from fakehw.agent.client import AgentClient, AgentRequestError
from fakehw.agent.service import AgentError, AgentService

__all__ = ["AgentClient", "AgentError", "AgentRequestError", "AgentService"]
