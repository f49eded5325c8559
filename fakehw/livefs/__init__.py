"""A node's ``/sys`` served live through FUSE: reads pass through to the rendered tree, writes go to the agent.

Why FUSE: only a filesystem can answer a writer the way sysfs does. ``cxl create-region``, ``cxl disable-memdev``
and ``daxctl`` write attributes and read the errno the kernel returns (EINVAL, EBUSY, ENXIO ...); a plain rendered
tree would accept any write as a file update, show it to the next reader and keep it across an agent restart.
Served through :class:`~fakehw.livefs.fs.LiveSysfs`:

- every read is of the file as the agent last rendered it (the agent re-renders before it answers a write, and
  the kernel's page cache is bypassed with ``direct_io`` and zero attribute/entry timeouts), so reads are current;
- opening an attribute for writing that the kernel would not let anyone write (mode without write bits, as
  rendered) fails with EACCES, reading a write-only one (``bind``, ``delete_region``) likewise, as kernfs does;
- a write to a writable attribute becomes ``POST /v1/nodes/{node}/sysfs`` (:mod:`fakehw.agent.cxlsysfs`), whose
  answer is the kernel's: the number of bytes consumed, or an errno the writer gets back unchanged;
- creating, removing, renaming or chmod-ing anything fails as on sysfs (EACCES to create, EPERM otherwise).

The server is its own process (:mod:`fakehw.livefs.__main__`, started by :class:`~fakehw.livefs.mount.LiveMount`),
so nothing a writer does can take the agent down with it. Without root or FUSE, :func:`unavailable` says why;
callers then bind the rendered tree read-only and say that writes are not presented.
"""

from fakehw.livefs.mount import LiveMount, unavailable

__all__ = ["LiveMount", "unavailable"]
