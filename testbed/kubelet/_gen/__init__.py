"""Generated protobuf code of the device plugin API (made on first import; see testbed/kubelet/protogen.py).

Importing this package makes sure ``deviceplugin_pb2`` is current and importable: from this directory or, when it
is read-only, from the cache directory the generator used. When the generated module does not match the protobuf
runtime (code generated at build time by a newer protoc than, say, a distribution's python3-protobuf), the message
classes are built from the generated descriptor set instead, which every protobuf runtime understands.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from testbed.kubelet.protogen import DESCRIPTOR_SET, MODULE, ensure_generated

_NAME = f"{__name__}.{MODULE}"


def _from_module(where: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(_NAME, where / f"{MODULE}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


def _from_descriptor_set(where: Path) -> types.ModuleType:
    """Message classes from the serialized FileDescriptorSet protoc wrote next to the module."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString((where / DESCRIPTOR_SET).read_bytes())
    pool = descriptor_pool.Default()
    proto = files.file[0]
    try:
        file_desc = pool.FindFileByName(proto.name)
    except KeyError:
        pool.Add(proto)
        file_desc = pool.FindFileByName(proto.name)
    module = types.ModuleType(_NAME)
    module.DESCRIPTOR = file_desc  # type: ignore[attr-defined]
    make = getattr(message_factory, "GetMessageClass", None)
    factory = None if make is not None else message_factory.MessageFactory(pool)
    for name, desc in file_desc.message_types_by_name.items():
        cls = make(desc) if make is not None else factory.GetPrototype(desc)  # type: ignore[union-attr]
        setattr(module, name, cls)
    sys.modules[_NAME] = module
    return module


def _load() -> None:
    where = ensure_generated()
    try:
        module = _from_module(where)
    except Exception:  # gencode/runtime version mismatch: build the classes from the descriptor set
        module = _from_descriptor_set(where)
    # Bound as the package attribute, so "from testbed.kubelet._gen import deviceplugin_pb2" finds it (type
    # checkers read the generated .pyi stub of the same name).
    globals()[MODULE] = module


_load()
