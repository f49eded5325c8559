"""Build hook: compile the fake libnvidia-ml.so.1 for this machine whenever the package is built or installed.

Everything else about the package is declared in pyproject.toml. The library is built by
fakehw/nvml/build.py (standard library only, so it runs in pip's isolated build environment); if no C compiler
is present the install still succeeds and the library is built on first use instead (with a clear error then).
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _nvml_build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_fakehw_nvml_build", HERE / "fakehw" / "nvml" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _protogen_module() -> ModuleType:
    """testbed/kubelet/protogen.py: generates the device plugin API code with grpcio-tools (stdlib at import)."""
    spec = importlib.util.spec_from_file_location("_fakehw_protogen", HERE / "testbed" / "kubelet" / "protogen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _generate_protos(cmd: build_py) -> None:
    """Device plugin API code: into the wheel, or the source tree for an editable install. Without grpcio-tools in
    the build environment (pip's isolated builds) it is generated on first import instead."""
    gen = _protogen_module()
    try:
        if getattr(cmd, "editable_mode", False):
            where = gen.ensure_generated()
        else:
            where = gen.generate(Path(cmd.build_lib) / "testbed" / "kubelet" / "_gen")
        cmd.announce(f"generated the device plugin API code in {where}", level=2)
    except gen.ProtoGenError as exc:
        cmd.warn(f"the device plugin API code was not generated now ({exc}); it is generated on first import")


class BuildPyWithNvml(build_py):
    """build_py, then the NVML shim: into the wheel, or into the source tree for an editable install."""

    def run(self) -> None:
        super().run()
        _generate_protos(self)
        nvml = _nvml_build_module()
        try:
            if getattr(self, "editable_mode", False):
                path = nvml.ensure_library()
            else:
                path = nvml.build_library(Path(self.build_lib) / "fakehw" / "nvml" / "_lib" / platform.machine()).path
            self.announce(f"built the fake NVML library: {path}", level=2)
        except nvml.BuildError as exc:
            self.warn(f"the fake NVML library was not built now ({exc}); it is built on first use")


setup(cmdclass={"build_py": BuildPyWithNvml})
