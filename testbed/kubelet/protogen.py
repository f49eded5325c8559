"""Generate the Python code of the device plugin API from ``proto/deviceplugin.proto`` with grpcio-tools.

Generated code is not kept in version control: it is made when the package is built (the ``setup.py`` hook, when
grpcio-tools is importable there) or on first import (:func:`ensure_generated`, called by
:mod:`testbed.kubelet._gen`). A stamp records the digest of the .proto and the versions of grpcio-tools and of the
protobuf runtime, so a changed .proto or an upgraded runtime regenerates instead of failing with a
gencode/runtime mismatch. Generation takes a file lock and replaces files atomically, so concurrent first imports
(parallel test workers, a plugin process and the harness) are safe.

When the package directory is read-only (an installed wheel built without grpcio-tools), the code goes to a cache
directory (``$FAKEHW_CACHE_DIR`` or ``~/.cache/fakehw``) instead. Where grpcio-tools is not installed at all (a node
image with the distribution's grpcio and protobuf), code generated at build time from the same .proto is used as
it is; besides the Python module the generator writes the serialized descriptor set (``deviceplugin.desc``), from
which :mod:`testbed.kubelet._gen` builds the message classes when the module does not match the protobuf runtime.

Standard library only at import time (grpcio-tools is imported when generating), so the build hook can load it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "proto" / "deviceplugin.proto"
PACKAGE_DIR = HERE / "_gen"
MODULE = "deviceplugin_pb2"
DESCRIPTOR_SET = "deviceplugin.desc"
OUTPUTS = (f"{MODULE}.py", f"{MODULE}.pyi", DESCRIPTOR_SET)
STAMP = "STAMP"


class ProtoGenError(RuntimeError):
    """The API code could not be generated; the message says what to install."""


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def stamp(proto: Path = PROTO) -> str:
    """What generated code must match: the .proto's digest and the generator and runtime versions."""
    digest = hashlib.sha256(proto.read_bytes()).hexdigest()
    return f"proto={digest} grpcio-tools={_version('grpcio-tools')} protobuf={_version('protobuf')}\n"


def _cache_dir() -> Path:
    base = os.environ.get("FAKEHW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fakehw")
    return Path(base) / "kubelet-proto"


def is_current(directory: Path, expected: str | None = None) -> bool:
    want = expected if expected is not None else stamp()
    try:
        return (directory / STAMP).read_text() == want and all((directory / f).is_file() for f in OUTPUTS)
    except OSError:
        return False


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on the directory itself (no lock file left behind)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def generate(directory: Path, proto: Path = PROTO) -> Path:
    """Run protoc (from grpcio-tools) for ``proto`` into ``directory``; returns ``directory``."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise ProtoGenError("grpcio-tools is not installed; install the package's dependencies "
                            "(pip install -e . or make deps)") from None
    import grpc_tools

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    want = stamp(proto)
    with _locked(directory):
        if is_current(directory, want):
            return directory
        with tempfile.TemporaryDirectory(prefix=".gen-", dir=directory) as tmp:
            args = ["grpc_tools.protoc", f"-I{proto.parent}", f"-I{include}", f"--python_out={tmp}",
                    f"--pyi_out={tmp}", f"--descriptor_set_out={Path(tmp) / DESCRIPTOR_SET}", str(proto)]
            if protoc.main(args) != 0:
                raise ProtoGenError(f"protoc failed for {proto}")
            for name in OUTPUTS:
                produced = Path(tmp) / (name if name == DESCRIPTOR_SET else name.replace(MODULE, proto.stem + "_pb2"))
                shutil.copyfile(produced, Path(tmp) / f"{name}.new")
                os.replace(Path(tmp) / f"{name}.new", directory / name)
            (Path(tmp) / STAMP).write_text(want)
            os.replace(Path(tmp) / STAMP, directory / STAMP)
    return directory


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK)


def _have_generator() -> bool:
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        return False
    return True


def _same_proto(directory: Path, proto: Path = PROTO) -> bool:
    """Code in ``directory`` was generated from this very .proto (by whatever generator version)."""
    try:
        recorded = (directory / STAMP).read_text().split()[0]
    except (OSError, IndexError):
        return False
    return recorded == stamp(proto).split()[0] and all((directory / f).is_file() for f in OUTPUTS)


def ensure_generated() -> Path:
    """Directory holding current generated code: the package's ``_gen`` if writable, else the cache."""
    want = stamp()
    if is_current(PACKAGE_DIR, want):
        return PACKAGE_DIR
    if not _have_generator():
        if _same_proto(PACKAGE_DIR):
            return PACKAGE_DIR  # generated at build time; the loader copes with another protobuf runtime
        raise ProtoGenError("the device plugin API code was not generated at build time and grpcio-tools is not "
                            "installed to generate it now (pip install grpcio-tools, then import again)")
    if _writable(PACKAGE_DIR):
        return generate(PACKAGE_DIR)
    cached = _cache_dir() / hashlib.sha256(want.encode()).hexdigest()[:16]
    if is_current(cached, want):
        return cached
    return generate(cached)


def main() -> int:
    """``python -m testbed.kubelet.protogen``: generate now (the Makefile runs this before type checking)."""
    print(ensure_generated())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
