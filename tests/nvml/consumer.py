"""A long-running NVML consumer the live tests steer: one JSON request per stdin line, one JSON answer per line.

It calls nvmlInit once and then keeps its handles, exactly like a device plugin or monitoring agent would, so a
test can inject a fault into the node and check that this already-running process sees it on its next call.

Requests: ``{"call": "nvmlDeviceGetTemperature", "args": ["$dev:3", 0]}`` (``$dev:N`` is the handle of device
N, ``$set`` the event set) answers ``{"ok": value}`` or ``{"err": code}``; ``{"register": mask}`` registers every
device for ``mask`` on the event set; ``{"wait": ms}`` waits for one event and answers its device index, type
and data (or the error); ``{"quit": true}`` ends.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from typing import Any

import pynvml


def plain(value: Any) -> Any:
    """JSON-able form of what pynvml returns (ctypes structs become dicts of their fields)."""
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, ctypes._SimpleCData):
        return value.value
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return repr(value)


def main() -> int:
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    index_of = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in enumerate(handles)}
    event_set = pynvml.nvmlEventSetCreate()
    print(json.dumps({"ready": count}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        started = time.monotonic()
        try:
            if "quit" in req:
                break
            if "register" in req:
                for h in handles:
                    pynvml.nvmlDeviceRegisterEvents(h, req["register"], event_set)
                answer: dict[str, Any] = {"ok": True}
            elif "wait" in req:
                data = pynvml.nvmlEventSetWait(event_set, req["wait"])
                answer = {"ok": {"device": index_of.get(ctypes.cast(data.device, ctypes.c_void_p).value),
                                 "type": data.eventType, "data": data.eventData}}
            else:
                args = []
                for a in req.get("args", []):
                    if isinstance(a, str) and a.startswith("$dev:"):
                        args.append(handles[int(a[5:])])
                    elif a == "$set":
                        args.append(event_set)
                    else:
                        args.append(a)
                answer = {"ok": plain(getattr(pynvml, req["call"])(*args))}
        except pynvml.NVMLError as exc:
            answer = {"err": int(exc.value)}
        answer["seconds"] = time.monotonic() - started
        print(json.dumps(answer), flush=True)
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
