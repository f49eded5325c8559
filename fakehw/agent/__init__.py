"""The node agent: owns runtime state of fake nodes, renders their outputs, serves the control API.

Import what you need from the modules (``fakehw.agent.client.AgentClient``, ``fakehw.agent.service.AgentService``);
this package imports nothing eagerly so that light users (the renderers, the pytest plugin) stay light.
"""
