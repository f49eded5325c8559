"""fakehw: emulated GPU-fabric hardware that real software cannot tell from the real thing."""

__version__ = "0.1.0"
