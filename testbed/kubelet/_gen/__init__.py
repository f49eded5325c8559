"""Generated protobuf code of the device plugin API (made on first import; see testbed/kubelet/protogen.py).

Importing this package makes sure ``deviceplugin_pb2`` is current and importable, from this directory or, when it
is read-only, from the cache directory the generator used.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from testbed.kubelet.protogen import MODULE, ensure_generated

_where = ensure_generated()
if _where.resolve() != Path(__file__).resolve().parent:
    _spec = importlib.util.spec_from_file_location(f"{__name__}.{MODULE}", _where / f"{MODULE}.py")
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _module
    _spec.loader.exec_module(_module)
    globals()[MODULE] = _module
