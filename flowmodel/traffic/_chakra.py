"""Chakra execution traces (ET): the workload format of ASTRA-sim and the Chakra tools, read and written.

A trace is one file per rank, ``<prefix>.<rank>.et``: a stream of protobuf messages, each preceded by
its byte length as a varint, a ``GlobalMetadata`` first and then ``Node`` s (schema version 0.0.4,
package ``ChakraProtoMsg``; field numbers in docs/sources.md). The schema is declared here with
protobuf's descriptor API, so no generated code is needed.

What the reader keeps of each node (:class:`RankTrace`, arrays over the rank's nodes in file order):

- ``COMP_NODE``: ``duration_micros`` (or the exact seconds in the ``duration_seconds`` attribute that
  flowmodel's writer adds, since the format's unit is a whole microsecond).
- ``COMM_COLL_NODE``: ``comm_type`` and ``comm_size`` (int64 or uint64); its group from the
  ``comm_group`` attribute (member ranks), else ``pg_name`` looked up in the comm-group file
  (ASTRA-sim's ``--comm-group-configuration``: ``{"name": [ranks]}``), else every rank.
- ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: ``comm_src``, ``comm_dst``, ``comm_tag`` and ``comm_size``
  or ``tensor_size``. A send or recv that names no peer has nothing to pair with; it is kept with peer
  -1 and the simulation treats it as a local no-op (see ``steptime.simulate_trace``).
- ``METADATA_NODE``, ``MEM_LOAD_NODE``, ``MEM_STORE_NODE``: their ``duration_micros`` (0 when absent),
  and their dependencies; no memory model.
- ``ctrl_deps`` and ``data_deps`` alike: a node starts after all of them.

Bad input (a truncated file, a length prefix past the end, an unknown node type, a missing rank file,
a dependency on a missing node) raises :class:`TraceError` naming the file, rank and node id.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

VERSION = "0.0.4"
NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
              "COMM_RECV_NODE", "COMM_COLL_NODE")
METADATA, MEM_LOAD, MEM_STORE, COMP, SEND, RECV, COLL = range(1, 8)
COMM_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL", "REDUCE_SCATTER",
              "REDUCE_SCATTER_BLOCK", "BARRIER")
# Chakra's collective -> flowmodel's collective kind (None: not modelled)
KIND_OF = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather", "REDUCE_SCATTER": "reduce_scatter",
           "REDUCE_SCATTER_BLOCK": "reduce_scatter", "ALL_TO_ALL": "all_to_all", "BROADCAST": "broadcast",
           "BARRIER": "barrier", "REDUCE": None, "GATHER": None, "SCATTER": None}
COMM_TYPE_OF = {"all_reduce": 0, "all_gather": 2, "broadcast": 5, "all_to_all": 6, "reduce_scatter": 7, "barrier": 9}

# AttributeProto's value oneof: field number -> (name, protobuf type); the *_list ones wrap `repeated`
_SCALARS = [("double", "TYPE_DOUBLE"), ("float", "TYPE_FLOAT"), ("int32", "TYPE_INT32"), ("int64", "TYPE_INT64"),
            ("uint32", "TYPE_UINT32"), ("uint64", "TYPE_UINT64"), ("sint32", "TYPE_SINT32"), ("sint64", "TYPE_SINT64"),
            ("fixed32", "TYPE_FIXED32"), ("fixed64", "TYPE_FIXED64"), ("sfixed32", "TYPE_SFIXED32"),
            ("sfixed64", "TYPE_SFIXED64"), ("bool", "TYPE_BOOL"), ("string", "TYPE_STRING"), ("bytes", "TYPE_BYTES")]


# the attributes the reader uses (others, e.g. is_cpu_op, are skipped unread)
_USED = frozenset({"duration_seconds", "comm_type", "comm_size", "size_bytes", "tensor_size", "comm_group", "pg_name",
                   "comm_src", "comm_dst", "comm_tag", "flowmodel_phase"})


class TraceError(ValueError):
    """A trace that cannot be read or simulated; the message names the file, rank and node."""


def _schema():
    F = descriptor_pb2.FieldDescriptorProto
    fp = descriptor_pb2.FileDescriptorProto(name="flowmodel_chakra_et_def.proto", package="ChakraProtoMsg",
                                            syntax="proto3")

    def message(name, fields, oneof=None):
        m = fp.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for number, fname, ftype, label, type_name, in_oneof in fields:
            f = m.field.add(name=fname, number=number, type=getattr(F, ftype), label=getattr(F, label))
            if type_name:
                f.type_name = type_name
            if in_oneof:
                f.oneof_index = 0
        return m

    opt, rep = "LABEL_OPTIONAL", "LABEL_REPEATED"
    for i, (name, _) in enumerate(_SCALARS):
        message(f"{name.capitalize()}List", [(1, "values", _SCALARS[i][1], rep, None, False)])
    attr = [(1, "name", "TYPE_STRING", opt, None, False), (2, "doc_string", "TYPE_STRING", opt, None, False)]
    for i, (name, ptype) in enumerate(_SCALARS):
        attr.append((3 + 2 * i, f"{name}_val", ptype, opt, None, True))
        attr.append((4 + 2 * i, f"{name}_list", "TYPE_MESSAGE", opt, f".ChakraProtoMsg.{name.capitalize()}List", True))
    message("AttributeProto", attr, oneof="value")
    message("IOInfo", [(1, "values", "TYPE_STRING", opt, None, False), (2, "shapes", "TYPE_STRING", opt, None, False),
                       (3, "types", "TYPE_STRING", opt, None, False)])
    message("GlobalMetadata", [(1, "version", "TYPE_STRING", opt, None, False),
                               (2, "attr", "TYPE_MESSAGE", rep, ".ChakraProtoMsg.AttributeProto", False)])
    node = fp.enum_type.add(name="NodeType")
    for i, name in enumerate(NODE_TYPES):
        node.value.add(name=name, number=i)
    coll = fp.enum_type.add(name="CollectiveCommType")
    for i, name in enumerate(COMM_TYPES):
        coll.value.add(name=name, number=i)
    message("Node", [(1, "id", "TYPE_UINT64", opt, None, False), (2, "name", "TYPE_STRING", opt, None, False),
                     (3, "type", "TYPE_ENUM", opt, ".ChakraProtoMsg.NodeType", False),
                     (4, "ctrl_deps", "TYPE_UINT64", rep, None, False),
                     (5, "data_deps", "TYPE_UINT64", rep, None, False),
                     (6, "start_time_micros", "TYPE_UINT64", opt, None, False),
                     (7, "duration_micros", "TYPE_UINT64", opt, None, False),
                     (8, "inputs", "TYPE_MESSAGE", opt, ".ChakraProtoMsg.IOInfo", False),
                     (9, "outputs", "TYPE_MESSAGE", opt, ".ChakraProtoMsg.IOInfo", False),
                     (10, "attr", "TYPE_MESSAGE", rep, ".ChakraProtoMsg.AttributeProto", False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    get = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
    return get("GlobalMetadata"), get("Node"), get("AttributeProto")


GlobalMetadata, Node, AttributeProto = _schema()


def attribute_value(attr):
    """The Python value of an ``AttributeProto`` (a number, bool, string, bytes or a list of them)."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    return list(value.values) if which.endswith("_list") else value


def make_attribute(name: str, value) -> AttributeProto:
    """An ``AttributeProto``: bool -> bool_val, int -> int64_val, float -> double_val, str -> string_val,
    a list of ints -> int64_list."""
    a = AttributeProto(name=name)
    if isinstance(value, (bool, np.bool_)):
        a.bool_val = bool(value)
    elif isinstance(value, (int, np.integer)):
        a.int64_val = int(value)
    elif isinstance(value, (float, np.floating)):
        a.double_val = float(value)
    elif isinstance(value, str):
        a.string_val = value
    else:
        a.int64_list.values.extend(int(v) for v in value)
    return a


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_messages(path: str):
    """The raw messages of one ET file: ``(metadata bytes, [node bytes, ...])`` (delimited framing)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    chunks, pos, n = [], 0, len(data)

    def where() -> str:  # the last message read whole, for the user to find the damage
        if len(chunks) < 2:
            return "after the GlobalMetadata" if chunks else "in the first message"
        try:
            return f"after node {Node.FromString(chunks[-1]).id}"
        except Exception:  # noqa: BLE001 - a damaged node: name its position instead
            return f"after message {len(chunks) - 1}"

    while pos < n:
        length, shift, start = 0, 0, pos
        while True:
            if pos >= n:
                raise TraceError(f"{path}: truncated length prefix at byte {start}, {where()}")
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise TraceError(f"{path}: malformed length prefix at byte {start}, {where()}")
        if pos + length > n:
            raise TraceError(f"{path}: message {len(chunks)} at byte {start} ({where()}) says {length} bytes, but only "
                             f"{n - pos} remain (truncated file?)")
        chunks.append(data[pos:pos + length])
        pos += length
    if not chunks:
        raise TraceError(f"{path}: empty file (expected a GlobalMetadata message, then nodes)")
    return chunks[0], chunks[1:]


@dataclasses.dataclass(frozen=True, eq=False)
class RankTrace:
    """One rank's nodes, as arrays in file order.

    Attributes:
      path: the file it came from.  ids: uint64 node ids.  names: node names.  types: NodeType values.
      duration: float64 seconds (compute, memory and metadata nodes; 0 for communication).
      comm: collective kind (``KIND_OF``) for COMM_COLL nodes, None otherwise.  size: float64 bytes of
      communication nodes.  group: index into ``Trace.groups`` (-1: every rank).  peer: a send's
      destination or a recv's source (-1: not named).  tag: p2p tag (0 when absent).
      label: the ``flowmodel_phase`` attribute of communication nodes (the contention class flowmodel's
        export names; None when absent).
      dep_ptr, deps: CSR of each node's dependencies (ctrl and data), as positions in this rank's arrays.
    """

    path: str
    ids: np.ndarray
    names: list
    types: np.ndarray
    duration: np.ndarray
    comm: list
    size: np.ndarray
    group: np.ndarray
    peer: np.ndarray
    tag: np.ndarray
    label: list
    dep_ptr: np.ndarray
    deps: np.ndarray

    @property
    def num_nodes(self) -> int:
        return self.ids.shape[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """A whole trace: every rank's nodes, the process groups collectives name, and (from flowmodel's
    export) the GPU each rank ran on."""

    prefix: str
    ranks: tuple[RankTrace, ...]
    groups: tuple[tuple[int, ...], ...]
    version: str = VERSION
    gpus: tuple[int, ...] | None = None  # the GPU of each rank, when the producer recorded it (flowmodel_gpu)

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def num_nodes(self) -> int:
        return sum(r.num_nodes for r in self.ranks)


def trace_ranks(prefix: str) -> int:
    """How many rank files ``<prefix>.<rank>.et`` exist (ranks 0..N-1; a gap is an error)."""
    folder, base = os.path.split(prefix)
    pattern = re.compile(re.escape(base) + r"\.(0|[1-9][0-9]*)\.et$")  # canonical numbers: t.01.et is not rank 1
    try:
        names = os.listdir(folder or ".")
    except OSError as e:
        raise TraceError(f"{prefix}: cannot list {folder or '.'} ({e.strerror or e})") from None
    found = sorted(int(m.group(1)) for f in names if (m := pattern.match(f)))
    if not found:
        raise TraceError(f"{prefix}: no trace files {prefix}.<rank>.et")
    gap = next((i for i, r in enumerate(found) if r != i), None)
    if gap is not None:
        raise TraceError(f"{prefix}.{gap}.et: missing (there are files up to rank {found[-1]} but not rank {gap})")
    return len(found)


def _read_groups(path: str | None, required: bool) -> dict[str, tuple[int, ...]]:
    if path is None or (not required and not os.path.exists(path)):
        return {}
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: cannot read the comm-group file ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(spec, dict):
        raise TraceError(f"{path}: expected a mapping of group name -> member ranks")
    out = {}
    for name, members in spec.items():
        if not (isinstance(members, list) and members and all(isinstance(r, int) and r >= 0 for r in members)):
            raise TraceError(f"{path}: group {name!r} must list member ranks (integers >= 0), got {members!r}")
        out[str(name)] = tuple(members)
    return out


def read_trace(prefix: str, *, comm_groups: str | None = None) -> Trace:
    """Read ``<prefix>.<rank>.et`` for every rank (and ``<prefix>.comm_group.json`` if present, or
    ``comm_groups``: ASTRA-sim's comm-group file)."""
    n = trace_ranks(prefix)
    named = _read_groups(comm_groups if comm_groups is not None else f"{prefix}.comm_group.json",
                         required=comm_groups is not None)
    groups: dict[tuple[int, ...], tuple[int, tuple[int, ...]]] = {}  # sorted members -> (index, members)
    ranks, gpus = [], []
    version = VERSION
    for r in range(n):
        path = f"{prefix}.{r}.et"
        meta, nodes = read_messages(path)
        try:
            metadata = GlobalMetadata.FromString(meta)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, named for the user
            raise TraceError(f"{path}: the first message is not a GlobalMetadata ({e})") from None
        version = metadata.version or version
        gpus.append(next((attribute_value(a) for a in metadata.attr if a.name == "flowmodel_gpu"), None))
        ranks.append(_read_rank(path, r, n, nodes, named, groups))
    recorded = None
    if all(isinstance(g, int) and g >= 0 for g in gpus) and len(set(gpus)) == n:
        recorded = tuple(gpus)
    return Trace(prefix, tuple(ranks), tuple(m for _, m in sorted(groups.values())), version, recorded)


def _read_rank(path, rank, n_ranks, messages, named, groups) -> RankTrace:
    N = len(messages)
    ids = np.empty(N, np.uint64)
    types = np.empty(N, np.int8)
    duration = np.zeros(N)
    size = np.zeros(N)
    group = np.full(N, -1, np.int64)
    peer = np.full(N, -1, np.int64)
    tag = np.zeros(N, np.int64)
    names, comm, label, dep_lists = [], [None] * N, [None] * N, []
    seen: dict[tuple, int] = {}
    for i, raw in enumerate(messages):
        try:
            node = Node.FromString(raw)
        except Exception as e:  # noqa: BLE001
            raise TraceError(f"{path}: rank {rank}, message {i + 1}: not a Node ({e})") from None
        t = node.type
        if t not in (METADATA, MEM_LOAD, MEM_STORE, COMP, SEND, RECV, COLL):
            kind = NODE_TYPES[t] if 0 <= t < len(NODE_TYPES) else f"unknown type {t}"
            raise TraceError(f"{path}: rank {rank}, node {node.id}: node type {kind} is not one this reader runs "
                             f"(known: {', '.join(NODE_TYPES[1:])})")
        ids[i], types[i] = node.id, t
        names.append(node.name)
        attrs = {a.name: attribute_value(a) for a in node.attr if a.name in _USED}
        try:
            _fields(i, t, node, attrs, duration, size, group, peer, tag, comm, label, seen, named, groups, n_ranks,
                    path, rank)
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(e, TraceError):
                raise
            raise TraceError(f"{path}: rank {rank}, node {node.id}: a malformed attribute ({e})") from None
        dep_lists.append((*node.ctrl_deps, *node.data_deps))
    position = {int(v): i for i, v in enumerate(ids.tolist())}
    if len(position) != N:
        values, counts = np.unique(ids, return_counts=True)
        raise TraceError(f"{path}: rank {rank}, node {int(values[counts > 1][0])}: the id is used twice")
    counts = np.fromiter((len(d) for d in dep_lists), np.int64, N)
    dep_ptr = np.concatenate([[0], np.cumsum(counts)])
    deps = np.empty(int(dep_ptr[-1]), np.int64)
    for i, d in enumerate(dep_lists):
        for j, dep in enumerate(d):
            if dep not in position:
                raise TraceError(f"{path}: rank {rank}, node {int(ids[i])}: depends on node {dep}, which the file "
                                 "does not have")
            deps[dep_ptr[i] + j] = position[dep]
    return RankTrace(path, ids, names, types, duration, comm, size, group, peer, tag, label, dep_ptr, deps)


def _fields(i, t, node, attrs, duration, size, group, peer, tag, comm, label, seen, named, groups, n_ranks, path,
            rank) -> None:
    """Fill node ``i``'s entries of the rank's arrays from its attributes (checked)."""
    if t in (COMP, METADATA, MEM_LOAD, MEM_STORE):
        exact = attrs.get("duration_seconds")
        value = float(exact) if exact is not None else node.duration_micros * 1e-6
        if not (np.isfinite(value) and value >= 0):
            raise TraceError(f"{path}: rank {rank}, node {node.id}: duration must be >= 0 and finite seconds, "
                             f"got {value!r}")
        duration[i] = value
    elif t == COLL:
        if "comm_type" not in attrs:
            raise TraceError(f"{path}: rank {rank}, node {node.id}: a COMM_COLL_NODE without comm_type")
        ct = int(attrs["comm_type"])
        if not 0 <= ct < len(COMM_TYPES):
            raise TraceError(f"{path}: rank {rank}, node {node.id}: unknown comm_type {ct}")
        comm[i] = KIND_OF[COMM_TYPES[ct]]
        if comm[i] is None:
            raise TraceError(f"{path}: rank {rank}, node {node.id}: collective {COMM_TYPES[ct]} is not modelled "
                             f"(modelled: {', '.join(k for k, v in KIND_OF.items() if v)})")
        size[i] = _size(attrs, path, rank, node.id, required=comm[i] != "barrier")
        key = (attrs.get("pg_name"), attrs.get("comm_group"))
        key = (key[0], tuple(key[1]) if key[1] is not None else None)
        if key not in seen:  # each distinct group is checked once per rank
            seen[key] = _group(attrs, named, groups, n_ranks, path, rank, node.id)
        group[i] = seen[key]
    if t in (COLL, SEND, RECV) and attrs.get("flowmodel_phase"):
        label[i] = str(attrs["flowmodel_phase"])
    if t in (SEND, RECV):
        size[i] = _size(attrs, path, rank, node.id, required=True)
        other = attrs.get("comm_dst" if t == SEND else "comm_src")
        if other is not None:
            other = int(other)
            if not 0 <= other < n_ranks or other == rank:
                raise TraceError(f"{path}: rank {rank}, node {node.id}: peer rank {other} is not another rank "
                                 f"of the trace (0..{n_ranks - 1})")
            peer[i] = other
        value = int(attrs.get("comm_tag", 0))
        if not -2**63 <= value < 2**63:
            raise TraceError(f"{path}: rank {rank}, node {node.id}: comm_tag {value} does not fit in 64 bits")
        tag[i] = value


def _size(attrs, path, rank, node_id, *, required: bool) -> float:
    for key in ("size_bytes", "comm_size", "tensor_size"):  # size_bytes: flowmodel's exact (float) size
        if key in attrs:
            value = float(attrs[key])
            if not np.isfinite(value) or value < 0 or (required and value == 0):
                raise TraceError(f"{path}: rank {rank}, node {node_id}: {key} must be > 0 bytes, got {value}")
            return value
    if required:
        raise TraceError(f"{path}: rank {rank}, node {node_id}: no comm_size or tensor_size")
    return 0.0


def _group(attrs, named, groups, n_ranks, path, rank, node_id) -> int:
    members = attrs.get("comm_group")
    if members is None and "pg_name" in attrs and attrs["pg_name"] != "":
        name = str(attrs["pg_name"])
        if name not in named:
            if not named:  # no comm-group file: every rank, as ASTRA-sim does without one
                return -1
            raise TraceError(f"{path}: rank {rank}, node {node_id}: pg_name {name!r} is not in the comm-group file")
        members = named[name]
    if members is None:
        return -1
    members = tuple(int(m) for m in members)
    if rank not in members or len(set(members)) != len(members) or min(members) < 0 or max(members) >= n_ranks:
        raise TraceError(f"{path}: rank {rank}, node {node_id}: comm group {list(members)} must list distinct ranks "
                         f"of the trace, this one among them")
    if members == tuple(range(n_ranks)):
        return -1
    key = tuple(sorted(members))  # the same group listed in another order is the same group (first order kept)
    if key not in groups:
        groups[key] = (len(groups), members)
    return groups[key][0]


@dataclasses.dataclass
class TraceWriter:
    """Writes one rank's ET file: ``add`` nodes in order, then ``close`` (the file appears whole at
    ``close``: it is written under a temporary name; ``discard`` drops it). Node ids count from 0."""

    path: str
    metadata: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self._tmp = f"{self.path}.tmp"
        self._fh = open(self._tmp, "wb")
        meta = GlobalMetadata(version=VERSION)
        meta.attr.extend(make_attribute(k, v) for k, v in self.metadata.items())
        self._write(meta)
        self.count = 0

    def _write(self, message):
        raw = message.SerializeToString()
        self._fh.write(_varint(len(raw)) + raw)

    def add(self, node_type: int, name: str, *, deps=(), duration: float = 0.0, attrs: dict | None = None) -> int:
        """Append a node (``duration`` in seconds: rounded to ``duration_micros``, exact in
        ``duration_seconds``); returns its id."""
        node = Node(id=self.count, name=name, type=node_type)
        node.data_deps.extend(int(d) for d in deps)
        node.attr.append(make_attribute("is_cpu_op", False))
        if node_type == COMP:
            node.duration_micros = int(round(duration * 1e6))
            node.attr.append(make_attribute("duration_seconds", float(duration)))
        for k, v in (attrs or {}).items():
            node.attr.append(make_attribute(k, v))
        self._write(node)
        self.count += 1
        return self.count - 1

    def close(self):
        self._fh.close()
        os.replace(self._tmp, self.path)

    def discard(self):
        self._fh.close()
        if os.path.exists(self._tmp):
            os.remove(self._tmp)


def write_comm_groups(prefix: str, groups: dict[str, list[int]]) -> str:
    """``<prefix>.comm_group.json``: group name -> member ranks (ASTRA-sim's comm-group file)."""
    from ..results import write_text

    path = f"{prefix}.comm_group.json"
    write_text(path, json.dumps({k: [int(r) for r in v] for k, v in groups.items()}))
    return path
