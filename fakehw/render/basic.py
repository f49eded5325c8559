"""The node's own description: ``node.json`` (model and derived topology) and ``state.json`` (runtime)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from fakehw.model.export import node_to_json
from fakehw.render import RenderContext
from fakehw.render.atomic import OutputDir

if TYPE_CHECKING:
    from fakehw.agent.state import ActiveFault, GpuState, NodeState

T = TypeVar("T")


def render_model(ctx: RenderContext, out: OutputDir) -> None:
    if ctx.initial or not out.path("node.json").exists():
        out.write_json("node.json", node_to_json(ctx.system, ctx.node))


def render_state(ctx: RenderContext, out: OutputDir) -> None:
    if ctx.memo is None:
        out.write_json("state.json", ctx.state.to_json(), compact=True)
        return
    memo = ctx.memo.get("state", StateFragments)
    data = state_json(ctx.state, memo)
    # What was written last is remembered: a change is written without reading the file back; the same bytes
    # again are compared with the file (which puts it back if someone removed it).
    out.write("state.json", data, changed=data != memo.written)
    memo.written = data


class StateFragments:
    """JSON text of the parts of ``state.json`` that rarely change (a GPU's state, an active fault), by the object
    it was made from, and of the lists that grow at their end (the node's active faults, a GPU's Xids and fault
    ids): a change re-encodes what it changed, not every fault of the node or of the GPU."""

    def __init__(self) -> None:
        self.gpus: dict[int, tuple[object, str]] = {}
        self.faults: dict[str, str] = {}
        """The JSON text of each active fault, by id (a heal rebuilds the list from these)."""
        self.fault_list = ListText()
        self.lists: dict[tuple[str, str], ListText] = {}
        """Per (GPU, list): its Xids' and fault ids' text."""
        self.templates: dict[str, tuple[tuple[object, ...], _Template]] = {}
        """Per GPU (by name) and for the node (""): what the object's members other than those given as text were
        made from, and the text around them (:func:`_filled`)."""
        self.written: bytes | None = None
        """The bytes of the last ``state.json`` written."""


class ListText:
    """The JSON text of a list's items (without the brackets), remembered with the items it was made from. The
    lists of ``state.json`` grow at their end between renders (an injection adds one fault, one Xid), so when the
    last items are a prefix of the new ones only the items that joined are encoded; otherwise it is made again."""

    def __init__(self) -> None:
        self.items: tuple[object, ...] = ()
        self.text = ""

    def of(self, items: tuple[T, ...], encode: Callable[[T], str],
           rebuild: Callable[[tuple[T, ...]], str] | None = None) -> str:
        """The text of ``items``: ``encode`` makes one item's, ``rebuild`` (default: ``encode`` each) the whole
        list's when it did not only grow."""
        old = self.items
        if old and len(items) >= len(old) and items[:len(old)] == old:  # the same objects: compared by identity
            text = ",".join([self.text, *map(encode, items[len(old):])]) if len(items) > len(old) else self.text
        else:
            text = rebuild(items) if rebuild is not None else ",".join(map(encode, items))
        self.items, self.text = items, text
        return text


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


_RAW = "\x00raw\x00"
"""What stands in for a member given as JSON text while the rest is encoded (see :class:`_Template`)."""


@functools.cache
def _token(key: str) -> str:
    """The JSON text of the placeholder of member ``key`` (a handful of keys: ``gpus``, ``faults``, ``xids``)."""
    return _compact(_RAW + key)


class _Template:
    """The JSON text of an object some of whose members are given as JSON text later: the text around those
    members, kept so an object whose other members did not change is not encoded again.

    One ``json.dumps`` of the whole object with a placeholder string for each such member, split where the
    placeholders are (a dumps per member costs more than the rest of the state's encoding). A placeholder that
    occurs other than once in the encoding (a value of ``doc`` happens to hold it) falls back to encoding member by
    member."""

    def __init__(self, doc: dict[str, Any], keys: Iterable[str]):
        tokens = {k: _token(k) for k in keys}
        text = _compact({**doc, **{k: _RAW + k for k in tokens}})
        self.doc: dict[str, Any] | None = None
        """Set when the text could not be split at the placeholders: then filled member by member."""
        self.parts: list[str] = []
        self.keys: list[str] = []
        if all(text.count(t) == 1 for t in tokens.values()):  # then split at the placeholders' places in ``text``
            pos = 0
            for start, token, key in sorted((text.index(token), token, k) for k, token in tokens.items()):
                self.parts.append(text[pos:start])
                self.keys.append(key)
                pos = start + len(token)
            self.parts.append(text[pos:])
        else:
            self.doc = doc

    def fill(self, raw: dict[str, str]) -> str:
        """The object's text with the members of ``raw`` (the template's keys) given as JSON text."""
        if self.doc is not None:
            doc = self.doc
            return "{" + ",".join(f"{_compact(k)}:{raw[k] if k in raw else _compact(doc[k])}"
                                  for k in sorted([*doc, *raw])) + "}"
        out = [self.parts[0]]
        for key, part in zip(self.keys, self.parts[1:], strict=True):
            out += (raw[key], part)
        return "".join(out)


def _faults_text(state: NodeState, memo: StateFragments) -> str:
    """The active faults as a JSON list's inside: appended to on an injection, else rebuilt from the remembered
    text of each fault (a heal)."""

    def encode(f: ActiveFault) -> str:
        text = memo.faults[f.id] = _compact(f.to_json())
        return text

    def rebuild(faults: tuple[ActiveFault, ...]) -> str:
        known = memo.faults
        memo.faults = {f.id: known[f.id] if f.id in known else _compact(f.to_json()) for f in faults}
        return ",".join(memo.faults.values())

    return memo.fault_list.of(state.faults, encode, rebuild)


@functools.cache
def _gpu_members() -> tuple[str, ...]:
    """The fields of a GPU state that ``state.json`` encodes as they are (all but the growing lists)."""
    from fakehw.agent.state import GpuState  # the agent imports this package: imported when first asked

    return tuple(f.name for f in dataclasses.fields(GpuState) if f.name not in _GPU_LISTS)


_GPU_LISTS = ("xids", "faults")


def _gpu_text(gpu: GpuState, memo: StateFragments) -> str:
    """A GPU's state as JSON: its Xids and fault ids (which grow with every fault on it) from their remembered
    text, the rest from the text it had last time when none of it changed. Most faults only add to the lists (an
    Xid that is not critical, a second ECC error of a kind already counted...), and encoding the rest (its 18 NVLink
    links with their counters) cost more than the rest of ``state.json``."""
    lists = memo.lists
    xids = lists.get((gpu.name, "xids")) or lists.setdefault((gpu.name, "xids"), ListText())
    ids = lists.get((gpu.name, "faults")) or lists.setdefault((gpu.name, "faults"), ListText())
    raw = {"xids": "[" + xids.of(gpu.xids, str) + "]", "faults": "[" + ids.of(gpu.faults, _compact) + "]"}
    key = tuple(getattr(gpu, name) for name in _gpu_members())
    return _filled(memo, gpu.name, key, lambda: gpu.to_json(history=False), raw)


def state_json(state: NodeState, memo: StateFragments) -> bytes:
    """``state.json``: the same bytes as ``dump_json(state.to_json(), compact=True)``, from remembered fragments."""
    gpus: dict[int, tuple[object, str]] = {}
    for g in state.gpus:
        hit = memo.gpus.get(id(g))
        if hit is None or hit[0] is not g:
            hit = (g, _gpu_text(g, memo))
        gpus[id(g)] = hit
    memo.gpus = gpus
    raw = {"gpus": "[" + ",".join(t for _, t in gpus.values()) + "]", "faults": "[" + _faults_text(state, memo) + "]",
           "generation": _compact(state.generation), "health": _compact(state.health)}
    # An injection changes the generation, a GPU and the faults; the rest of the node (its platform's 34 NUMA
    # nodes on a GB200 tray, MIG) is encoded again only when one of the objects it is made from differs.
    key = (state.node, state.seed, state.memdevs, state.pools, state.down_ports, state.platform, state.mig)
    return (_filled(memo, "", key, lambda: state.to_json(gpus=False, faults=False), raw) + "\n").encode()


def _filled(memo: StateFragments, name: str, key: tuple[object, ...], doc: Callable[[], dict[str, Any]],
            raw: dict[str, str]) -> str:
    """The text of object ``name`` (a GPU's name, or "" for the node) with the members of ``raw`` given as text:
    from its remembered template while ``key`` (what its other members are made from) is the same, else from a
    template of ``doc()`` made now."""
    hit = memo.templates.get(name)
    if hit is None or hit[0] != key:
        hit = memo.templates[name] = (key, _Template(doc(), raw))
    return hit[1].fill(raw)
