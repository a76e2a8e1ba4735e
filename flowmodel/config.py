"""Scenario files: one YAML schema for fabric, workloads, model options and optimizer.

``load(path)`` reads a file into a :class:`Scenario` of flowmodel objects (``Fleet``, ``Training``,
``Inference``, ``Background``, ``Knob`` ...). Units are strings converted once (``400Gbps``,
``50GB/s``, ``10km``, ``2us``). Every error is a ``ConfigError`` (a ``ValueError``) whose message
names the key path and the bad value, e.g. ``fabric.sites[2].scale_out.oversubscription[1]: must be
> 0 and finite, got -1``; unknown keys are rejected with the closest known one. See configs/*.yaml.

Each YAML section is declared once, as a :class:`Section` of :class:`Key` s: the key's kind (type or
unit), default and meaning, and the field of the frozen dataclass it fills. Reading, checking,
defaults, the conversion to the dataclass and the reference (docs/config.md) all come from that
declaration; a key that fills a dataclass field takes the field's default, so the default is written
once, in the dataclass. A new section is one more ``Section`` and its key in ``SCENARIO`` (the
:class:`Scenario` field it fills).

>>> import yaml
>>> from flowmodel import config
>>> text = '''
... fabric:
...   sites:
...     - {name: hall, scale_out: {tiers: 3, pods: 2, aggs_per_plane: 2, oversubscription: [1, 4]}}
... workloads:
...   training:
...     - {name: job, model: llama3-405b, parallelism: {tp: 8, pp: 8, dp: 8}, global_batch: 64}
... '''
>>> scenario = config.parse(yaml.safe_load(text))
>>> scenario.fleet.sites[0].scale_out.num_gpus, scenario.training[0].parallelism.size
(512, 512)
>>> config.parse(yaml.safe_load(text.replace("[1, 4]", "[1, -4]")))
Traceback (most recent call last):
...
flowmodel.config.ConfigError: fabric.sites[0].scale_out.oversubscription[1]: must be > 0 and finite, got -4.0
>>> config.parse(yaml.safe_load(text.replace("global_batch", "global_bach")))
Traceback (most recent call last):
...
flowmodel.config.ConfigError: workloads.training[0].global_bach: unknown key; did you mean 'global_batch'?
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import math
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import yaml

from . import _units, hardware, traffic
from .fabric import Clos, Fleet, LongHaul, ScaleUp, Site, full_mesh, ring
from .optimize import CostModel, Knob
from .scenario import FailureSet, Routing, Scenario, Search, SweepGrid, is_link_group
from .steptime import CABLES, SWITCHES, Component, Congestion, Options, Reliability
from .traffic import RL, Agentic, Background, Inference, Model, Parallelism, Recommendation, Serving, Training


class ConfigError(ValueError):
    """A scenario file that cannot be used; the message starts with the key path."""


REQUIRED = object()  # a key without a default
FIELD = object()  # the default of the dataclass field the key fills (declared there, once)


class Key(NamedTuple):
    """One YAML key. ``kind``: a type name, a unit kind (``_units.UNITS``), a :class:`Section`, or
    ``[Section]`` for a list of them. ``field``: the target dataclass field it fills (``""``: the
    field of the key's name; None: no field, the section's ``convert`` reads it)."""

    kind: Any
    meaning: str
    default: Any = FIELD
    field: str | None = ""


def of(cls, name: str):
    """The default of dataclass field ``cls.name`` (``REQUIRED`` when it has none)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


class Read(NamedTuple):
    """What ``_read`` hands a section's ``convert``: the values read (key -> value, defaults filled),
    the keys the file set, and the section's key path."""

    values: dict
    given: set
    where: str


class Section(dict):
    """One YAML section: key -> :class:`Key`, in the order the reference lists them.

    ``target``: the frozen dataclass the section becomes (``target(**fields)``; its ValueErrors get
    the key path); ``convert(read)``: instead, for a section that is not one dataclass (``read``: a
    :class:`Read`); ``part``: the
    section's fields go into the enclosing section's target (``reliability.checkpoint``)."""

    def __init__(self, keys: dict[str, Key], *, target: type | None = None,
                 convert: Callable[[Read], Any] | None = None, part: bool = False):
        resolved, self.from_field = {}, set()
        for name, key in keys.items():
            if key.default is FIELD:  # read once from the dataclass: the defaults cannot drift apart
                if target is None or key.field is None:
                    raise TypeError(f"config key {name!r}: FIELD default without a target field")
                key = key._replace(default=of(target, key.field or name))
                self.from_field.add(name)
            resolved[name] = key
        super().__init__(resolved)
        self.target, self.convert, self.part = target, convert, part

    def fields(self, values: dict) -> dict:
        """The target's keyword arguments from the read ``values`` (lists become tuples)."""
        out = {}
        for name, key in self.items():
            value = values[name]
            if isinstance(key.kind, Section) and key.kind.part:  # its keys fill this target's fields
                out.update(value)
            elif key.field is not None:
                out[key.field or name] = tuple(value) if isinstance(value, list) else value
        return out


def _given(read: Read) -> Read:
    """A section kept as read (values and the keys the file set) for its enclosing section to finish:
    a site's scale_up and scale_out, whose unset keys its accelerator fills."""
    return read


def _sites(read: Read) -> list[Site]:
    values, where = read.values, read.where
    if values["copies"] < 1:
        _fail(f"{where}.copies", f"must be >= 1, got {values['copies']}")
    acc, up, out = values["accelerator"], values["scale_up"], values["scale_out"]
    if acc is not None:  # keys the site sets win; the rest come from its accelerator
        if up is None:
            up = _read({}, SCALE_UP, f"{where}.scale_up")
        fill = {"size": acc.scale_up_size, "bandwidth": acc.scale_up_bandwidth, "topology": acc.scale_up_topology}
        if "bandwidth" not in up.given:  # the preset's efficiency goes with its physical bandwidth, never alone
            fill["efficiency"] = acc.scale_up_efficiency
        up = up._replace(values={**up.values, **{k: v for k, v in fill.items() if k not in up.given}})
        if out is not None and "nic_bandwidth" not in out.given:
            nic = {"nic_bandwidth": acc.nic_bandwidth, "nic_efficiency": acc.nic_efficiency}
            out = out._replace(values={**out.values, **{k: v for k, v in nic.items() if k not in out.given}})
    values = dict(values, scale_up=None if up is None else _make(ScaleUp, SCALE_UP.fields(up.values), up.where),
                  scale_out=None if out is None else _make(Clos, SCALE_OUT.fields(out.values), out.where))
    name, copies, fields = values["name"], values["copies"], SITE.fields(values)
    return [_make(Site, dict(fields, name=n), where) for n in ([name] if copies == 1 else
                                                               [f"{name}{c}" for c in range(copies)])]


def _fabric(read: Read) -> dict:
    values = read.values
    sites = [site for copies in values["sites"] for site in copies]
    links = list(values["long_haul"] or [])
    topo = values["topology"]
    if topo is not None:
        kinds = {"ring": ring, "full_mesh": full_mesh}
        if topo["kind"] not in kinds:
            _fail("fabric.topology.kind", f"unknown topology {topo['kind']!r}; known: {', '.join(kinds)}")
        names = [s.name for s in sites]
        links += list(_make(lambda **kw: kinds[topo["kind"]](names, **kw),
                            dict(capacity=topo["capacity"], length_km=topo["length"]), "fabric.topology"))
    fleet = _make(Fleet, dict(sites=tuple(sites), long_haul=tuple(links)), read.where)
    return {"fleet": fleet, "routing": values["routing"]}


def _training(read: Read, fleet: Fleet) -> Training:
    """A training job on ``fleet``: peak_flops and hbm it does not set come from the accelerators of the
    sites it runs on, per pipeline stage (``hardware.stage_figures``)."""
    values, given = read.values, read.given
    first, size = values["first_rank"], values["parallelism"].size
    fields = dict(TRAINING.fields(values), ranks=tuple(range(first, first + size)))
    if not {"peak_flops", "hbm"} <= given:
        try:
            figures = hardware.stage_figures(fleet, values["parallelism"], fields["ranks"], values["model"].dtype_bytes,
                                             peak_flops=fields["peak_flops"], hbm=fields["hbm"])
        except ValueError as e:
            _fail(read.where, str(e))
        if figures is not None:
            for key, per_stage in zip(("peak_flops", "hbm"), figures):
                if key not in given:
                    fields[f"stage_{key}"] = per_stage
    return _make(Training, fields, read.where)


def _accelerator(read: Read) -> hardware.Accelerator:
    """A custom accelerator: the keys given, the rest from the preset named by ``like``."""
    values, given, where = read.values, read.given, read.where
    base = {}
    if "like" in given:
        like = _make(hardware.preset, dict(name=values["like"], where=f"{where}.like"), "")
        base = {f.name: getattr(like, f.name) for f in dataclasses.fields(like) if f.name != "sources"}
    fields = dict(base, **{k: values[k] for k in given if k != "like"})
    # a preset's efficiency belongs to its figure: a new bandwidth starts at 1 unless it gives its own
    if "scale_up_bandwidth" in given and "scale_up_efficiency" not in given:
        fields["scale_up_efficiency"] = 1.0
    if {"nic_speed", "nics_per_gpu"} & given and "nic_efficiency" not in given:
        fields["nic_efficiency"] = 1.0
    fields.setdefault("name", "custom")
    required = [f.name for f in dataclasses.fields(hardware.Accelerator) if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in fields]
    if missing:
        _fail(f"{where}.{missing[0]}", f"is required (or start from a preset with like: {', '.join(hardware.PRESETS)})")
    return _make(hardware.Accelerator, fields, where)


def _recommendation(read: Read) -> Recommendation:
    first, gpus = read.values["first_rank"], read.values["gpus"]
    ranks = tuple(range(first, first + gpus)) if isinstance(gpus, int) and gpus >= 1 and first >= 0 else None
    if first < 0:
        _fail(f"{read.where}.first_rank", f"must be >= 0, got {first}")
    return _make(Recommendation, dict(RECOMMENDATION.fields(read.values), ranks=ranks), read.where)


def _serving(fields: dict, values: dict, given: set, fleet: Fleet, ranks, model: Model, where: str) -> dict:
    """``fields`` with the inference GPUs' figures (``SERVING_KEYS``): peak_flops, hbm_bandwidth and
    host_bandwidth the file did not set come from the accelerators of the sites ``ranks`` are on;
    the compute figures become a ``Serving``."""
    try:
        figures = hardware.serving_figures(fleet, ranks, model.dtype_bytes, peak="peak_flops" not in given)
    except ValueError as e:
        _fail(where, str(e))
    chosen = {k: values[k] if k in given else figures.get(k) for k in SERVING_KEYS}
    fields["serving"] = _make(Serving, {k: chosen[k] for k in ("peak_flops", "hbm_bandwidth", "efficiency")
                                        if chosen[k] is not None}, where, "serving")
    if chosen["host_bandwidth"] is not None:
        fields["host_bandwidth"] = chosen["host_bandwidth"]
    return fields


def _rl(read: Read, fleet: Fleet) -> RL:
    """An RL workload on ``fleet``: its trainer is a training job (``_training``); the generators'
    figures come from their sites' accelerators unless set."""
    values, given, where = read.values, read.given, read.where
    trainer = values["trainer"]
    if "name" not in trainer.given:
        trainer = trainer._replace(values={**trainer.values, "name": f"{values['name']}/trainer"})
    trainer = _training(trainer, fleet)
    total = fleet.num_gpus
    if max(trainer.ranks) >= total:
        _fail(f"{where}.trainer", f"needs GPUs {min(trainer.ranks)}..{max(trainer.ranks)}, the fabric has {total}")
    generators = values["generators"] or ()
    ranks = [r for g in generators for r in g] or list(trainer.ranks)
    if max(ranks) >= total:
        _fail(f"{where}.generators", f"needs GPUs {min(ranks)}..{max(ranks)}, the fabric has {total}")
    fields = dict(RL_SECTION.fields(values), trainer=trainer, generators=tuple(generators))
    return _make(RL, _serving(fields, values, given, fleet, ranks, trainer.model, where), where)


def _agentic(read: Read, fleet: Fleet) -> Agentic:
    values, given, where = read.values, read.given, read.where
    ranks = [r for i in values["instances"] for r in i]
    if max(ranks) >= fleet.num_gpus:
        _fail(f"{where}.instances", f"needs GPUs {min(ranks)}..{max(ranks)}, the fabric has {fleet.num_gpus}")
    fields = _serving(AGENTIC.fields(values), values, given, fleet, ranks, values["model"], where)
    return _make(Agentic, fields, where)


def _instances(read: Read) -> tuple[tuple[int, ...], ...]:
    first, count, tp = read.values["first_rank"], read.values["instances"], read.values["tp"]
    if count < 1 or tp < 1:
        _fail(read.where, f"instances and tp must be >= 1, got {count} and {tp}")
    return tuple(tuple(range(first + i * tp, first + (i + 1) * tp)) for i in range(count))


def _background(read: Read) -> Background:
    src, dst = read.values["src"], read.values["dst"]
    if len(src) != len(dst) or not src:
        _fail(read.where, f"src and dst need the same non-zero length, got {len(src)} and {len(dst)}")
    return _make(Background, BACKGROUND.fields(read.values), read.where)


def _options(read: Read) -> Options:
    values, where = read.values, read.where
    for key in ("packet", "buffer"):  # they shape the queueing model only: never accept and ignore them
        if key in read.given and not values["queueing"]:
            _fail(f"{where}.{key}", f"is used only with model.queueing: true, got {values[key]} without it")
    congestion = None
    if values["window"] is not None or values["queueing"]:
        congestion = _make(Congestion, dict(window=values["window"], queueing=values["queueing"],
                                            packet_bytes=values["packet"], buffer_bytes=values["buffer"]),
                           where, "congestion")
    return _make(Options, dict(OPTIONS.fields(values), congestion=congestion), where, "options")


def _by_name(read: Read) -> tuple:
    """(name, value) of the keys the file set (``reliability.switches``: the kinds given a rate)."""
    return tuple((k, c) for k, c in read.values.items() if k in read.given)


def _scenario(read: Read) -> Scenario:
    fab, wl = read.values["fabric"], read.values["workloads"]
    training = tuple(_training(job, fab["fleet"]) for job in wl["training"] or ())
    inference = tuple(wl["inference"] or ())
    recommendation = tuple(wl["recommendation"] or ())
    rl = tuple(_rl(job, fab["fleet"]) for job in wl["rl"] or ())
    agentic = tuple(_agentic(job, fab["fleet"]) for job in wl["agentic"] or ())
    if not training and not inference and not recommendation and not rl and not agentic:
        _fail("workloads", "needs at least one training job or inference service (or a recommendation, rl or "
                           "agentic workload)")
    total = fab["fleet"].num_gpus
    for key, jobs in (("training", training), ("recommendation", recommendation)):
        for i, job in enumerate(jobs):
            if max(job.ranks) >= total:
                _fail(f"workloads.{key}[{i}]", f"needs GPUs {min(job.ranks)}..{max(job.ranks)}, the fabric has {total}")
    return _make(Scenario, dict(SCENARIO.fields(read.values), fleet=fab["fleet"], routing=fab["routing"],
                                training=training, inference=inference, background=tuple(wl["background"] or ()),
                                recommendation=recommendation, rl=rl, agentic=agentic), read.where)


SCALE_UP = Section({
    "size": Key("int", "accelerators per scale-up domain (8 for HGX, 72 for a rack-scale domain)"),
    "bandwidth": Key("bandwidth", "what each accelerator can send (and receive) inside its domain"),
    "latency": Key("time", "accelerator-to-accelerator latency inside the domain"),
    "topology": Key("str", "`switch` (NVSwitch-like) or `full_mesh` (each pair linked directly)"),
    "efficiency": Key("float", "fraction of the bandwidth collectives reach; the links carry bandwidth x efficiency "
                               "(default 1: the bandwidth is effective; from an accelerator preset, its calibrated "
                               "figure along with its physical bandwidth)"),
}, target=ScaleUp, convert=_given)
SCALE_OUT = Section({
    "tiers": Key("int", "2 (leaf, spine) or 3 (leaf, spine, aggregation)"),
    "gpus_per_leaf": Key("int", "NIC ports (GPUs) per leaf switch"),
    "leaves_per_pod": Key("int", "leaf switches per pod"),
    "spines_per_pod": Key("int", "spine switches per pod; every leaf connects to every spine of its pod"),
    "pods": Key("int", "pods (3 tiers only; a 2-tier Clos has one pod)"),
    "aggs_per_plane": Key("int", "aggregation switches per spine plane (3 tiers)"),
    "nic_bandwidth": Key("bandwidth", "each GPU's NIC"),
    "oversubscription": Key("ratios", "per upper tier, (capacity in from below) / (capacity up): `[1, 4]` is 1:1 "
                                      "leaf to spine, 4:1 spine to aggregation; one number for every tier; "
                                      "default non-blocking"),
    "latency": Key("time", "per scale-out link"),
    "rail_optimized": Key("bool", "GPU r of every scale-up domain goes to a leaf of rail r"),
    "radix": Key("int", "switch port count; every switch's ports must fit in it (unchecked when absent)"),
    "nic_efficiency": Key("float", "fraction of the NIC bandwidth collectives reach; the NIC links carry nic_bandwidth "
                                   "x nic_efficiency (default 1; from an accelerator preset, its calibrated figure "
                                   "along with its NIC speed)"),
}, target=Clos, convert=_given)
SITE = Section({
    "name": Key("str", "unique site name; prefixes its nodes and link groups (`b0/spine_up`)"),
    "scale_up": Key(SCALE_UP, "the scale-up domains the site's GPUs are grouped into", None),
    "scale_out": Key(SCALE_OUT, "the site's scale-out Clos; absent: the site is one scale-up domain", None),
    "border_oversubscription": Key("float", "(top-tier capacity) / (capacity to the border router), used when "
                                            "long-haul links leave the site"),
    "copies": Key("int", "identical sites named `<name>0`, `<name>1`, ...", 1, None),
    "accelerator": Key("accelerator", "the site's GPUs: a preset or a mapping (below); its scale_up (size, "
                                      "bandwidth, topology; absent: the preset's domain) and scale_out.nic_bandwidth "
                                      "default from it, and training jobs take peak_flops and hbm from it, per "
                                      "pipeline stage, unless they set them"),
}, target=Site, convert=_sites)
ACCELERATOR = Section({
    "like": Key("str", "a preset the keys not given are taken from", None, None),
    "name": Key("str", "label", None, None),
    "bf16_flops": Key("float", "peak dense BF16 FLOP/s per GPU", None, None),
    "fp8_flops": Key("float", "peak dense FP8 FLOP/s per GPU (used when model.dtype_bytes is 1)", None, None),
    "fp16_flops": Key("float", "peak dense FP16 FLOP/s per GPU", None, None),
    "tf32_flops": Key("float", "peak dense TF32 FLOP/s per GPU (used when model.dtype_bytes is 4)", None, None),
    "hbm": Key("size", "memory per GPU", None, None),
    "hbm_bandwidth": Key("bandwidth", "peak memory bandwidth per GPU", None, None),
    "scale_up_size": Key("int", "GPUs per scale-up domain", None, None),
    "scale_up_bandwidth": Key("bandwidth", "what each GPU sends inside its domain, per direction", None, None),
    "scale_up_topology": Key("str", "`switch` or `full_mesh`", None, None),
    "nics_per_gpu": Key("int", "scale-out NICs per GPU", None, None),
    "nic_speed": Key("bandwidth", "each NIC's speed (a site's nic_bandwidth: nics_per_gpu x nic_speed)", None, None),
    "host_bandwidth": Key("bandwidth", "each GPU's link to host memory (PCIe, NVLink-C2C), per direction", None, None),
    "scale_up_efficiency": Key("float", "fraction of the scale-up bandwidth collectives reach (nccl-tests busbw / "
                                        "line rate); a site that takes the bandwidth takes it too (1 when the "
                                        "mapping gives its own scale_up_bandwidth)", None, None),
    "nic_efficiency": Key("float", "fraction of the NIC speed collectives reach (1 when the mapping gives its own "
                                   "nic_speed or nics_per_gpu)", None, None),
}, convert=_accelerator)
LONG_HAUL = Section({
    "a": Key("str", "one site's name"),
    "b": Key("str", "the other site's name"),
    "capacity": Key("bandwidth", "each way; link group `long_haul/<a>-<b>`"),
    "length": Key("length", "fibre length; latency is length x 4.9 us/km plus extra_latency", field="length_km"),
    "extra_latency": Key("time", "added to the fibre's latency (regenerators, routers)"),
}, target=LongHaul)
TOPOLOGY = Section({
    "kind": Key("str", "`ring` or `full_mesh` over every site, in the order listed", REQUIRED),
    "capacity": Key("bandwidth", "each link's capacity, each way", REQUIRED),
    "length": Key("length", "each link's fibre length", REQUIRED),
})
ROUTING = Section({
    "policy": Key("str", "`ecmp` (a hash picks one path per flow), `spray` (every path evenly), "
                         "`qp_scaling` (qps hashed queue pairs per flow), `wcmp` (learnable splits)"),
    "max_paths": Key("int", "candidate paths per GPU pair"),
    "site_paths": Key("int", "candidate site-level paths between sites"),
    "seed": Key("int", "hash seed of ecmp and qp_scaling"),
    "qps": Key("int", "queue pairs per flow under qp_scaling"),
    "seeds": Key("int", "hash-routed figures (ecmp, qp_scaling) are evaluated over the seeds seed, seed + 1, ..., "
                        "in one batch, and reported as mean and spread (`--seeds N` sets it); default 8 in `run` "
                        "and `failures`, 1 in the search of `optimize`; spray and wcmp have one value"),
}, target=Routing)
FABRIC = Section({
    "sites": Key([SITE], "buildings, campuses or regions", REQUIRED),
    "long_haul": Key([LONG_HAUL], "scale-across links between sites' border routers", None),
    "topology": Key(TOPOLOGY, "long-haul links generated over all sites (added to long_haul)", None),
    "routing": Key(ROUTING, "how every workload is routed", {}),
}, convert=_fabric)
MODEL = Section({
    "name": Key("str", "label", "model"),
    "layers": Key("int", "transformer layers"),
    "hidden": Key("int", "hidden size"),
    "ffn_hidden": Key("int", "MLP (SwiGLU) hidden size"),
    "heads": Key("int", "attention heads"),
    "kv_heads": Key("int", "key/value heads (GQA)"),
    "vocab": Key("int", "vocabulary size"),
    "seq_len": Key("int", "tokens per sequence"),
    "experts": Key("int", "MoE experts per layer (0: dense)"),
    "top_k": Key("int", "experts each token is routed to"),
    "moe_ffn_hidden": Key("int", "each expert's hidden size (default ffn_hidden)"),
    "capacity_factor": Key("float", "expert buffer slots per routed token: all-to-all bytes and expert compute "
                                    "scale with top_k x capacity_factor; > 0"),
    "shared_experts": Key("int", "experts of moe_ffn_hidden every token passes through, beside the routed ones"),
    "dense_layers": Key("int", "the first layers that have a dense MLP of ffn_hidden instead of experts"),
    "head_dim": Key("int", "per-head width of values (and of queries and keys without their rotary part); "
                           "default hidden / heads"),
    "kv_lora_rank": Key("int", "multi-head latent attention: the KV latent the cache holds per token and layer "
                               "(0: grouped-query attention)"),
    "q_lora_rank": Key("int", "latent attention: the query latent (0: queries projected from the hidden state)"),
    "rope_head_dim": Key("int", "latent attention: the rotary part of each query and key head (one rotary key "
                                "per token shared by all heads, kept in the cache)"),
    "dtype_bytes": Key("int", "bytes per activation and weight element"),
}, target=Model)
PARALLELISM = Section({
    "tp": Key("int", "tensor parallel degree (with sequence parallelism)"),
    "pp": Key("int", "pipeline parallel degree"),
    "dp": Key("int", "data parallel degree"),
    "cp": Key("int", "context parallel degree"),
    "ep": Key("int", "expert parallel degree, a divisor of dp"),
    "virtual_stages": Key("int", "model chunks per pipeline rank (interleaved 1F1B when > 1)"),
    "order": Key("strs", "rank order, fastest-varying first"),
    "tp_across_domains": Key("bool", "allow a TP group to span scale-up domains"),
}, target=Parallelism)
TRAINING = Section({
    "name": Key("str", "unique workload name", REQUIRED),
    "model": Key("model", "a preset name or a model mapping (below)"),
    "parallelism": Key(PARALLELISM, "how the job is split over its GPUs"),
    "global_batch": Key("int", "sequences per step; a multiple of dp x micro_batch"),
    "micro_batch": Key("int", "sequences per micro-batch"),
    "efficiency": Key("float", "fraction of peak_flops the matmuls reach, in (0, 1]"),
    "peak_flops": Key("float", "per-GPU dense peak, FLOP/s (default: each pipeline stage its sites' accelerator's, "
                               "the slowest where a stage spans several; without one, H100 SXM BF16)"),
    "hbm": Key("size", "memory per GPU; the job's estimated memory per GPU must fit (default: each pipeline stage "
                       "its sites' accelerator's, the smallest; without one, H100 SXM)"),
    "grad_bytes": Key("int", "bytes per gradient element in the DP reduction"),
    "algorithm": Key("str", "all-reduce algorithm of the DP reduction: `ring` or `tree`"),
    "first_rank": Key("int", "the job's first GPU rank; it runs on the next tp x cp x pp x dp ranks", 0, None),
    "tokens": Key("float", "tokens to train on (for the time to train; write 1.5e+13: YAML needs the sign)"),
    "steps": Key("int", "steps to train, instead of tokens"),
    "zero_stage": Key("int", "what the data-parallel ranks shard (memory per GPU): 0 nothing, 1 optimizer state "
                             "(Megatron's distributed optimizer), 2 gradients too (Llama 3's FSDP)"),
    "recompute": Key("str", "`none` (every layer keeps its activations) or `full` (a layer keeps its input and "
                            "reruns its forward, collectives included, in the backward pass)"),
    "optimizer_bytes": Key("int", "optimizer state per parameter (Adam: fp32 master weights and two moments)"),
    "channels": Key("int", "parallel rings (NCCL channels) of a ring collective whose groups have several members "
                           "per scale-up domain (default: one per member, so every NIC carries the ring; 1: one flat "
                           "ring, one NIC per domain)"),
}, target=Training, convert=_given)  # built by _scenario, on the fleet's accelerators (_training)
INSTANCES = Section({
    "first_rank": Key("int", "first GPU rank of the first instance", REQUIRED),
    "instances": Key("int", "instances, on consecutive ranks", 1),
    "tp": Key("int", "GPUs per instance", 8),
}, convert=_instances)
INFERENCE = Section({
    "name": Key("str", "unique workload name"),
    "model": Key("model", "a preset name or a model mapping"),
    "prefill": Key(INSTANCES, "the prefill instances"),
    "decode": Key(INSTANCES, "the decode instances; each request's KV cache moves prefill -> decode"),
    "requests_per_s": Key("float", "request rate of the whole service"),
    "prompt_tokens": Key("int", "tokens per prompt (sets the KV cache size)"),
}, target=Inference)
BACKGROUND = Section({
    "name": Key("str", "unique workload name"),
    "src": Key("ints", "source GPU ranks, one per flow"),
    "dst": Key("ints", "destination GPU ranks, one per flow"),
    "rate": Key("bandwidth", "constant rate of each flow"),
}, target=Background, convert=_background)
RECOMMENDATION = Section({
    "name": Key("str", "unique workload name"),
    "gpus": Key("int", "GPUs of the job, on consecutive ranks from first_rank"),
    "first_rank": Key("int", "the job's first GPU rank", 0, None),
    "tables": Key("int", "embedding tables, sharded table-wise: a multiple of gpus"),
    "rows": Key("int", "rows per table"),
    "dim": Key("int", "embedding width"),
    "element_bytes": Key("int", "bytes per embedding element (pooled vectors and their gradients)"),
    "pooling": Key("float", "lookups per sample per table, pooled into one vector; > 0"),
    "batch_per_gpu": Key("int", "samples per GPU per iteration"),
    "dense_params": Key("float", "parameters of the bottom and top MLPs (data parallel; write 2.5e+7)"),
    "grad_bytes": Key("int", "bytes per dense gradient element in the all-reduce"),
    "peak_flops": Key("float", "per-GPU dense peak, FLOP/s (the default: H100 SXM BF16)"),
    "efficiency": Key("float", "fraction of peak_flops the MLPs reach, in (0, 1]"),
    "hbm_bandwidth": Key("bandwidth", "the rate of embedding lookups and updates (the default: H100 SXM)"),
    "algorithm": Key("str", "all-reduce algorithm of the dense gradients: `ring` or `tree`"),
}, target=Recommendation, convert=_recommendation)
RL_TRAINER = Section({  # a training job's keys (their defaults the dataclass's again), with a default name
    **{k: key._replace(default=FIELD) if k in TRAINING.from_field else key for k, key in TRAINING.items()},
    "name": Key("str", "label (default `<rl name>/trainer`)", None)}, target=Training, convert=_given)
SERVING_KEYS = {  # read by _serving into a Serving and the workload's host_bandwidth
    "peak_flops": Key("float", "per-GPU dense peak of the inference GPUs, FLOP/s (default: their sites' "
                               "accelerator's in the model's dtype; without one, H100 SXM BF16)", None, None),
    "hbm_bandwidth": Key("bandwidth", "per-GPU HBM bandwidth of the inference GPUs (default: as peak_flops)", None,
                         None),
    "efficiency": Key("float", "fraction of peak_flops prefill and decode matmuls reach, in (0, 1]",
                      of(Serving, "efficiency"), None),
    "host_bandwidth": Key("bandwidth", "each GPU's host link (PCIe, NVLink-C2C), each way (default: its site's "
                                       "accelerator's; without one, PCIe Gen5 x16, 64GB/s)", None, None),
}
RL_SECTION = Section({
    "name": Key("str", "unique workload name"),
    "trainer": Key(RL_TRAINER, "the trainer: a training job (keys as workloads.training)", REQUIRED, None),
    "generators": Key(INSTANCES, "generator instances on their own GPUs; absent: co-located on the trainer's GPUs, "
                                 "taking turns with it", None, None),
    "generator_tp": Key("int", "co-located: GPUs per generator instance (consecutive trainer ranks)"),
    "rollouts": Key("int", "sequences generated per iteration, spread over the instances"),
    "prompt_tokens": Key("int", "tokens per prompt"),
    "response_tokens": Key("int", "tokens generated per sequence"),
    "sync": Key("str", "weight sync: `broadcast` (buckets down a chain over every generator GPU, "
                       "checkpoint-engine's default) or `p2p` (each generator GPU fetches its own shard)"),
    "bucket": Key("size", "broadcast bucket size", field="bucket_bytes"),
    "channels": Key("int", "parallel chains of the broadcast (NCCL channels); chain c enters every scale-up domain "
                           "at its c-th GPU, so the chains cross domains through different NICs"),
    "weights_in_host": Key("bool", "the weights wait in host memory: each bucket (piece) crosses its owner's host "
                                   "link first"),
    "weight_bytes": Key("int", "bytes per synced parameter (default: the model's dtype_bytes)"),
    "rollout_bytes_per_token": Key("int", "bytes per rollout token sent back to the trainer"),
    "train_steps": Key("int", "trainer optimizer steps per iteration"),
    "schedule": Key("str", "`synchronous` or `one_step_off` (generation overlaps training; needs generators of "
                           "their own)"),
    **SERVING_KEYS,
}, target=RL, convert=_given)  # built by _scenario, on the fleet's accelerators (_rl)
AGENTIC = Section({
    "name": Key("str", "unique workload name"),
    "model": Key("model", "a preset name or a model mapping"),
    "instances": Key(INSTANCES, "the serving instances"),
    "requests_per_s": Key("float", "request rate of the whole service"),
    "context_tokens": Key("int", "the context a request starts with (long context: documents, history)"),
    "output_tokens": Key("int", "tokens generated per model call"),
    "turns": Key("int", "model calls per request (turns - 1 tool calls between them)"),
    "tool_tokens": Key("int", "tokens each tool result adds to the context"),
    "tool_seconds": Key("time", "CPU time of each tool call"),
    "prefix_hit_rate": Key("float", "fraction of the starting context whose KV cache the store holds (fetched over "
                                    "the fabric instead of prefilled), in [0, 1]"),
    "batch": Key("int", "requests decoded together on an instance"),
    "offload": Key("bool", "the request's KV cache goes to host memory during each tool call and comes back"),
    "write_back": Key("bool", "the final KV cache goes to the store (its bytes load the fabric, off the latency)"),
    "storage_bandwidth": Key("bandwidth", "each site's KV-cache store, in and out"),
    **SERVING_KEYS,
}, target=Agentic, convert=_given)  # built by _scenario, on the fleet's accelerators (_agentic)
WORKLOADS = Section({
    "training": Key([TRAINING], "training jobs (the step time is the slowest job's)", None),
    "inference": Key([INFERENCE], "disaggregated inference services (constant load + KV transfer time)", None),
    "background": Key([BACKGROUND], "constant-rate traffic classes (storage, agentic, telemetry)", None),
    "recommendation": Key([RECOMMENDATION], "DLRM-class training jobs: embedding all-to-alls and the dense "
                                            "all-reduce on the fabric, per iteration", None),
    "rl": Key([RL_SECTION], "RL post-training: trainer, rollout generators, weight sync and rollouts on the fabric, "
                            "per iteration", None),
    "agentic": Key([AGENTIC], "agentic inference: long-context multi-turn requests, KV cache fetched from storage "
                              "and offloaded to host memory, per request", None),
})
OPTIONS = Section({  # YAML `model` -> Options; window and the queue shape -> Options.congestion
    "sharpness": Key("float", "sharpness of the smooth rates the optimizer searches with"),
    "step_latency": Key("time", "latency added to every step of every collective (software, NIC)"),
    "window": Key("size", "bytes in flight per flow; caps each flow at window / RTT", of(Congestion, "window"), None),
    "queueing": Key("bool", "add M/M/1 queueing delay at each link's mean utilisation",
                    of(Congestion, "queueing"), None),
    "packet": Key("size", "packet size of the queueing model (needs queueing)", of(Congestion, "packet_bytes"), None),
    "buffer": Key("size", "per-port buffer of the queueing model (default 1,000 packets; needs queueing)",
                  of(Congestion, "buffer_bytes"), None),
    "fleet_tolerance": Key("float", "relative change at which the sweeps coupling jobs that share links stop", FIELD,
                           "fleet_tol"),
    "fleet_iterations": Key("int", "the most sweeps coupling jobs that share links (jobs that share none: none)"),
    "transport": Key("str", "transport profile fitted against ns-3, on the scale-out and scale-across links: "
                            "tcp (NewReno), newreno, cubic, dctcp"),
    "protocol": Key("str", "simple (every collective at the fluid rate) or nccl (training's per-layer ring "
                           "collectives run the protocol NCCL 2.22.3's tuning model picks for their size: LL, LL128 "
                           "or Simple, with its bandwidth share and latency; the DP reductions pay Simple's latency "
                           "at the fluid rate; step_latency must then be 0)"),
    "nccl_latency_scale": Key("float", "with protocol nccl: what the chosen protocol's latency costs, as a multiple of "
                                       "the tuning model's (its choice is unchanged; 0.86 fitted on 8x NVLink4 "
                                       "nccl-tests)"),
    "nccl_floor": Key("time", "with protocol nccl: the least a collective call costs (launch and completion; "
                              "18.5 us fitted on 8x NVLink4 nccl-tests)"),
    "engine": Key("str", "kernels of the exact model: auto (host on a CPU backend, else xla), host, xla", "auto"),
}, target=Options, convert=_options)
RENAMED = {"model.alpha": "model.step_latency"}  # old key -> new key: a clear error, never ignored
KNOB = Section({
    "group": Key("str", "a link group (`b0/spine_up`, `long_haul/b0-b1`, ...; `flowmodel validate` lists them)"),
    "lower": Key("knob", "lower bound: a ratio for oversubscription groups, a bandwidth for capacity groups"),
    "upper": Key("knob", "upper bound, in the same unit"),
    "allowed": Key("knobs", "values the result is rounded to (port speeds, ratios)"),
}, target=Knob)
COST = Section({
    "per_gbps": Key("prices", "tier -> price per Gbit/s of capacity (ports and optics)"),
    "per_gbps_km": Key("float", "price per Gbit/s x km of links with a length (long-haul fibre)"),
}, target=CostModel)
OPTIMIZE = Section({
    "knobs": Key([KNOB], "the link groups the optimizer may change"),
    "cost": Key(COST, "price of capacity", {}),
    "budget": Key("float", "the most the knobs' capacity may cost (none: unconstrained)"),
    "steps": Key("int", "gradient steps per restart"),
    "learning_rate": Key("float", "Adam's learning rate, > 0"),
    "restarts": Key("int", "random restarts (the best is kept)"),
    "seed": Key("int", "seed of the restarts"),
    "objective": Key("str", "what to minimise: `step_time` (the slowest job), `throughput` (GPU-weighted mean step "
                            "time of the training jobs, plus kv_weight x each inference service's KV transfer time), "
                            "`expected` (over the failures section, weighted by probability and healthy_weight), "
                            "`time_to_train` (the reliability section)"),
    "kv_weight": Key("float", "under `throughput`: seconds of objective per second of each inference service's KV "
                              "transfer time (0: inference does not enter)"),
    "search": Key("str", "rates the gradient search runs on: `exact` (the exact model's subgradients: a search step "
                         "costs 2-3 exact evaluations) or `smooth` (the alpha-fair relaxation: 9-16); results are "
                         "always reported exact"),
    "routing": Key("str", "`wcmp`: the split weights of every job's routed phases join the search beside the knobs "
                          "(needs fabric.routing.policy: wcmp; the as-built point is the even split); `none`: routes "
                          "stay as routed"),
}, target=Search)
SWEEP = Section({
    "grid": Key("grid", "link group (`b0/spine_up`) or config key path (`fabric.routing.policy`, "
                        "`workloads.training[0].parallelism.tp`) -> list of values; the sweep evaluates every "
                        "combination: link-group points batched on one prepared model, each combination of config "
                        "keys prepared again"),
    "chunk": Key("int", "points per vmapped call (default: all at once)"),
    "batching": Key("str", "`auto` (time both ways on the first points, keep the faster), `vmap` or `loop`"),
}, target=SweepGrid)
SAMPLE = Section({
    "count": Key("int", "draws, each of weight 1 / count; every element of failures.tiers and "
                        "failures.switch_kinds fails independently (`resilience.sampled_failures`)",
                 field="sample_count"),
    "seed": Key("int", "seed of the draws", field="sample_seed"),
    "probabilities": Key("probabilities", "tier or switch kind -> probability each of its elements fails "
                                          "(default: failures.probability)", field="sample_probabilities"),
}, target=FailureSet, part=True)
FAILURES = Section({
    "tiers": Key("strs", "one failure per cable of these tiers (e.g. `[long_haul]`)"),
    "switch_kinds": Key("strs", "one failure per switch of these kinds (e.g. `[spine]`)"),
    "sites": Key("bool", "one failure per site (all its GPUs and links)"),
    "fraction": Key("float", "a failed cable keeps this fraction of its capacity (none: it is cut)"),
    "probability": Key("float", "weight p_i of each failure scenario; with `sample`, the probability that each "
                                "element fails in a draw"),
    "healthy_weight": Key("float", "weight w_h of the healthy fabric: expected = (w_h t_h + sum_i p_i t_i) / "
                                   "(w_h + sum_i p_i) (default 1; with `sample`, 0: the draws in which nothing "
                                   "fails are the healthy cases)"),
    "sample": Key(SAMPLE, "instead of one failure per element, seeded draws of independent failures", {}, None),
}, target=FailureSet)
COMPONENT = Section({
    "rate_per_day": Key("float", "failures per component per day (e.g. 2.8e-4 per GPU-day, docs/sources.md)"),
    "repair": Key("time", "time to repair or replace it: how long a failure the fabric routes around degrades the "
                          "job (an interrupted job restarts on spares without waiting)"),
}, target=Component)
CHECKPOINT = Section({
    "bytes_per_parameter": Key("float", "checkpoint bytes per model parameter (bf16 weights, fp32 master weights "
                                        "and Adam moments: 14)"),
    "size": Key("size", "checkpoint size, instead of bytes_per_parameter", field="checkpoint_size"),
    "interval": Key("time", "work between checkpoints (default: the exact optimum)"),
    "mode": Key("str", "`pause` (the job waits for the write) or `overlap` (the write runs alongside it)",
                field="checkpoint_mode"),
    "snapshot": Key("time", "the job's pause per checkpoint under `overlap` (copy to host memory)"),
}, target=Reliability, part=True)
STORAGE = Section({
    "bandwidth": Key("bandwidth", "into (and out of) each site's storage, attached to its top-tier switches",
                     field="storage_bandwidth"),
    "capacity": Key("size", "what each site's storage holds (default: unbounded)", field="storage_capacity"),
}, target=Reliability, part=True)
RESTART = Section({
    "detection": Key("time", "from an interruption to its detection"),
    "rescheduling": Key("time", "from detection to the job rescheduled on spares (the checkpoint read follows)"),
}, target=Reliability, part=True)
MONTE_CARLO = Section({
    "runs": Key("int", "seeded Monte Carlo runs (p50 / p90 of the time to train)"),
    "seed": Key("int", "seed of the runs"),
    "weibull_shape": Key("float", "shape of the inter-arrival times (1: exponential, the analytic model's)"),
}, target=Reliability, part=True)
RELIABILITY = Section({
    "gpu": Key(COMPONENT, "each GPU (with its HBM); interrupts the job", {}),
    "host": Key(COMPONENT, "each host of gpus_per_host GPUs; interrupts the job", {}),
    "nic": Key(COMPONENT, "each GPU's NIC; interrupts the job", {}),
    "site_power": Key(COMPONENT, "each site the job runs in; the job waits for the repair to restart", {}),
    "switches": Key(Section({k: Key(COMPONENT, f"each {k} switch the job's routes cross", None) for k in SWITCHES},
                            convert=_by_name), "per switch kind: interrupts or degrades the job as the fabric "
                                               "re-routes around one", {}),
    "cables": Key(Section({k: Key(COMPONENT, f"each {k} cable the job's routes cross", None) for k in CABLES},
                          convert=_by_name), "per link tier: interrupts or degrades the job as the fabric "
                                             "re-routes around one", {}),
    "gpus_per_host": Key("int", "GPUs per host"),
    "checkpoint": Key(CHECKPOINT, "what is saved, how often, and whether the job waits for it", {}, None),
    "storage": Key(STORAGE, "each site's checkpoint storage", {}, None),
    "restart": Key(RESTART, "what an interruption costs besides the lost work and the checkpoint read", {}, None),
    "monte_carlo": Key(MONTE_CARLO, "the seeded simulation beside the analytic expectation", {}, None),
}, target=Reliability)
SCENARIO = Section({  # a new section: its declaration above, one key here, its field of Scenario
    "name": Key("str", "the scenario's name (printed and written to results)", "scenario"),
    "fabric": Key(FABRIC, "sites, long-haul links and routing", REQUIRED, None),
    "workloads": Key(WORKLOADS, "training jobs, inference services, background traffic", REQUIRED, None),
    "model": Key(OPTIONS, "options of the step-time model", {}, "options"),
    "optimize": Key(OPTIMIZE, "what `flowmodel optimize` may change, at what cost"),
    "sweep": Key(SWEEP, "what `flowmodel sweep` evaluates"),
    "failures": Key(FAILURES, "what `flowmodel failures` fails"),
    "reliability": Key(RELIABILITY, "failure rates, checkpoints and restarts: `flowmodel run` adds the time to train "
                                    "(needs tokens or steps on a training job)"),
}, target=Scenario, convert=_scenario)

MODEL_PRESETS = {"llama3-8b": traffic.llama3_8b, "llama3-70b": traffic.llama3_70b, "llama3-405b": traffic.llama3_405b,
                 "mixtral-8x22b": traffic.mixtral_8x22b, "deepseek-v3": traffic.deepseek_v3, "kimi-k2": traffic.kimi_k2}


def _fail(where: str, message: str):
    raise ConfigError(f"{where}: {message}")


def _scalar(kind: str, value, where: str):
    if kind in _units.UNITS:
        try:
            return _units.parse(value, kind, where, unit=True)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(where, f"expected an integer, got {value!r}")
        return value
    if kind == "float":
        number = _units.NUMBER.match(value) if isinstance(value, str) else None
        if number and not number.group(2):
            value = float(number.group(1))  # YAML 1.1 reads 1e11 (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            _fail(where, f"expected a number, got {value!r}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            _fail(where, f"expected true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            _fail(where, f"expected a string, got {value!r}")
        return value
    if kind == "ratios" and not isinstance(value, list):  # one ratio for every tier
        return _scalar("float", value, where)
    if kind in ("ratios", "ints", "strs", "knobs"):
        items = value if isinstance(value, list) else None
        if items is None:
            _fail(where, f"expected a list, got {value!r}")
        item = {"ratios": "float", "ints": "int", "strs": "str", "knobs": "knob"}[kind]
        return [_scalar(item, v, f"{where}[{i}]") for i, v in enumerate(items)]
    if kind == "knob":  # a ratio (number) or a capacity (bandwidth string)
        return _scalar("bandwidth", value, where) if isinstance(value, str) else _scalar("float", value, where)
    if kind == "grid":  # link group -> ratios or capacities; config key path -> YAML values, read per variant
        if not isinstance(value, dict) or not value:
            _fail(where, f"expected a mapping of link group or config key -> list of values, got {value!r}")
        out = {}
        for k, v in value.items():
            if is_link_group(k):
                out[str(k)] = _scalar("knobs", v, f"{where}.{k}")
                continue
            if not _is_key_path(str(k)):
                _fail(f"{where}.{k}", "expected a link group (site/tier) or a config key path, e.g. "
                                      "fabric.routing.policy or workloads.training[0].parallelism.tp")
            if not isinstance(v, list) or not v:
                _fail(f"{where}.{k}", f"expected a non-empty list of values, got {v!r}")
            out[str(k)] = v
        return out
    if kind == "probabilities":
        if not isinstance(value, dict):
            _fail(where, f"expected a mapping of tier or switch kind -> probability, got {value!r}")
        return {str(k): _scalar("float", v, f"{where}.{k}") for k, v in value.items()}
    if kind == "prices":
        if not isinstance(value, dict):
            _fail(where, f"expected a mapping of tier -> price per Gbit/s, got {value!r}")
        return {str(k): _scalar("float", v, f"{where}.{k}") for k, v in value.items()}
    if kind == "accelerator":
        if isinstance(value, str):
            if value not in hardware.PRESETS:
                _fail(where, f"unknown accelerator preset {value!r}; known: {', '.join(hardware.PRESETS)}")
            return hardware.PRESETS[value]
        return _read(value, ACCELERATOR, where)
    if kind == "model":
        if isinstance(value, str):
            if value not in MODEL_PRESETS:
                _fail(where, f"unknown model preset {value!r}; known: {', '.join(MODEL_PRESETS)}")
            return MODEL_PRESETS[value]()
        return _read(value, MODEL, where)
    raise AssertionError(kind)


def _read(obj, section: Section, where: str):
    """``obj`` read against ``section``: unknown keys rejected, defaults filled, every value checked,
    then converted (to the section's dataclass, or by its ``convert``)."""
    if not isinstance(obj, dict):
        _fail(where, f"expected a mapping, got {obj!r}")
    for key in obj:
        path = f"{where}.{key}" if where else str(key)
        if path in RENAMED:
            _fail(path, f"was renamed to {RENAMED[path]!r} (the same per-step latency, with units)")
        if key not in section:
            close = difflib.get_close_matches(str(key), list(section), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(section)}"
            _fail(path, f"unknown key{hint}")
    given = {key for key, value in obj.items() if value is not None}
    values = {}
    for key, (kind, _, default, _) in section.items():
        path = f"{where}.{key}" if where else key
        if key not in given:
            if default is REQUIRED:
                _fail(path, "is required")
            # a section left out with default {} takes every default of its keys
            if isinstance(kind, Section) and default == {}:
                values[key] = _read({}, kind, path)
            else:  # a fresh copy of a mutable default: no two scenarios share one dict
                values[key] = dict(default) if isinstance(default, dict) else default
        elif isinstance(kind, Section):
            values[key] = _read(obj[key], kind, path)
        elif isinstance(kind, list):
            if not isinstance(obj[key], list):
                _fail(path, f"expected a list, got {obj[key]!r}")
            values[key] = [_read(item, kind[0], f"{path}[{i}]") for i, item in enumerate(obj[key])]
        else:
            values[key] = _scalar(kind, obj[key], path)
    if section.convert is not None:
        return section.convert(Read(values, given, where))
    if section.part:
        return section.fields(values)
    if section.target is not None:
        return _make(section.target, section.fields(values), where)
    return values


def _make(cls, fields: dict, where: str, alias: str | None = None):
    """``cls(**fields)``; its own ValueError is re-raised with the key path in front (``alias``: the
    name the class's messages use for the section at ``where``, e.g. ``options`` for ``model``)."""
    try:
        return cls(**fields)
    except ValueError as e:
        message = str(e)
        if not where:
            raise ConfigError(message) from None
        last = where.rsplit(".", 1)[-1]
        base = last.split("[", 1)[0]
        head = re.match(r"^([A-Za-z_]+)(?=[.:\[])", message)
        if head and alias is not None and head.group(1) == alias:
            message, head = base + message[len(alias):], re.match(r"^([A-Za-z_]+)", base)
        nested = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        if (head and head.group(1) != base and head.group(1) in nested
                and message[len(head.group(1))] == "."):  # "parallelism.ep: ..." of a training job: one path
            raise ConfigError(f"{where}.{message}") from None
        if head and head.group(1) == base:  # "scale_out.ratio[1]: ..." under "...scale_out" -> one path
            message = message[len(base):]
            if message.startswith("[") and "[" in last:  # the index is already in the path
                message = message[message.index("]") + 1:]
            raise ConfigError(f"{where}{message}") from None
        raise ConfigError(f"{where}: {message}") from None


def parse(data: Any) -> Scenario:
    """A scenario from already-parsed YAML data (a mapping). A sweep over config keys gets its
    variants: every combination of their values applied to ``data`` and parsed (so a bad value is
    refused when the file is loaded, named by its sweep key)."""
    if not isinstance(data, dict):
        _fail("scenario", f"expected a mapping of sections ({', '.join(SCENARIO)}), got {type(data).__name__} {data!r}")
    scenario = _read(data, SCENARIO, "")
    if scenario.sweep is None or not scenario.sweep.settings:
        return scenario
    settings = scenario.sweep.settings
    base = copy.deepcopy(data)
    grid = {k: v for k, v in base["sweep"]["grid"].items() if is_link_group(k)}
    if grid:
        base["sweep"]["grid"] = grid
    else:
        del base["sweep"]
    variants = []
    for combo in itertools.product(*(values for _, values in settings)):
        variant = copy.deepcopy(base)
        for (path, _), value in zip(settings, combo):
            variant = _assign(variant, path, copy.deepcopy(value), f"sweep.grid.{path}")
        assignment = tuple((path, value) for (path, _), value in zip(settings, combo))
        try:
            variants.append((assignment, parse(variant)))
        except ConfigError as e:
            at = ", ".join(f"{path} = {value!r}" for path, value in assignment)
            raise ConfigError(f"sweep.grid: at {at}: {e}") from None
    return dataclasses.replace(scenario, sweep=dataclasses.replace(scenario.sweep, variants=tuple(variants)))


def override(data: Any, assignment: str) -> Any:
    """``data`` (parsed YAML) with one ``KEY.PATH=VALUE`` applied (``flowmodel --set``): the value is
    read as YAML, so ``400Gbps``, ``8192`` and ``[1, 4]`` mean what they mean in a file; list items
    are indexed (``workloads.training[0].global_batch=8192``); missing sections are created. The
    result is checked by ``parse`` like a file, with the same units and errors."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not _is_key_path(key):
        raise ConfigError(f"--set {assignment!r}: expected KEY.PATH=VALUE, e.g. workloads.training[0].global_batch=128")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {key}: cannot read {text!r} ({getattr(e, 'problem', e)})") from None
    return _assign(data, key, value, f"--set {key}")


def _tokens(key: str) -> list[str]:
    """A key path's parts: ``a.b[0].c`` -> ``a``, ``b``, ``[0]``, ``c``."""
    return re.findall(r"[^.\[\]]+|\[\d+\]", key)


def _is_key_path(key: str) -> bool:
    return bool(key) and "".join(t if t.startswith("[") else "." + t for t in _tokens(key)).lstrip(".") == key


def _assign(data: Any, key: str, value: Any, label: str) -> Any:
    """``data`` with the item at key path ``key`` set to ``value`` (missing sections created)."""
    tokens = _tokens(key)
    data = {} if data is None else data
    node, where = data, ""
    for token, following in zip(tokens, tokens[1:] + [None]):
        if token.startswith("["):
            index = int(token[1:-1])
            if not isinstance(node, list) or index >= len(node):
                size = "is not a list"
                if isinstance(node, list):
                    size = f"has {len(node)} item{'' if len(node) == 1 else 's'}"
                raise ConfigError(f"{label}: {where or 'the scenario'} {size}")
            where += token
            if following is None:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{label}: {where or 'the scenario'} is not a mapping")
        where = f"{where}.{token}" if where else token
        if following is None:
            node[token] = value
        else:
            if node.get(token) is None:
                node[token] = [] if following.startswith("[") else {}
            node = node[token]
    return data


def load(path: str, overrides: tuple[str, ...] | list[str] = ()) -> Scenario:
    """Read and check a scenario file, with ``overrides`` (``KEY.PATH=VALUE``, see ``override``)."""
    return parse(read(path, overrides))


def read(path: str, overrides: tuple[str, ...] | list[str] = ()) -> Any:
    """A scenario file's YAML data with ``overrides`` applied, not yet checked: what ``load`` parses
    (and what result files record as the resolved config)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if data is None and not overrides:
        raise ConfigError(f"{path}: the file is empty; a scenario needs at least 'fabric' and 'workloads'")
    for assignment in overrides:
        data = override(data, assignment)
    return data


_KINDS = {"int": "integer", "float": "number", "bool": "true / false", "str": "string",
          "bandwidth": "bandwidth (`400Gbps`, `50GB/s`)", "time": "time (`2us`, `1.5ms`)",
          "length": "length (`30km`, `500m`)", "size": "bytes (`256MiB`, `80GB`)",
          "ratios": "ratio or list of ratios", "ints": "list of integers", "strs": "list of strings",
          "knob": "ratio or bandwidth", "knobs": "list of ratios or bandwidths",
          "grid": "mapping: link group or config key path -> list of values", "prices": "mapping: tier -> number",
          "probabilities": "mapping: tier or switch kind -> number",
          "model": "preset name or mapping (`model` below)",
          "accelerator": "preset name or mapping (`accelerator` below)"}


def _default(kind, default) -> str:
    if default is REQUIRED:
        return "**required**"
    if isinstance(kind, Section) and default == {}:
        return "all defaults"
    if default is None or isinstance(kind, (Section, list)) or (isinstance(default, (tuple, dict)) and not default):
        return "-"
    if kind == "size":  # a power-of-two size reads best in binary units (4096 -> 4KiB)
        binary = [(u, f) for u, f in _units.UNITS["size"].items() if "i" in u]
        exact = [f"{default / f:g}{u}" for u, f in binary if default % f == 0 and default / f < 1024]
        if exact:
            return f"`{exact[-1]}`"
    if kind in _units.UNITS:
        return f"`{_units.format_value(default, kind)}`"
    if isinstance(default, tuple):
        return f"`[{', '.join(map(str, default))}]`"
    return f"`{str(default).lower() if isinstance(default, bool) else default}`"


def _row(key: str, kind_text: str, k: Key) -> str:
    return f"| `{key}` | {kind_text} | {_default(k.kind, k.default)} | {k.meaning} |"


def reference() -> str:
    """The YAML reference (docs/config.md): every key of every section, with its type and unit, its
    default and its meaning, generated from the section declarations."""
    lines = ["# Scenario file reference", "",
             "Generated from the section declarations in `flowmodel/config.py` (`flowmodel reference > "
             "docs/config.md`); a test keeps the two in step. Units are converted once, when the file is read; "
             "unknown keys and units are errors that name the key, and so is a bandwidth, time, length or size "
             "without its unit (`400` for `400Gbps`; plain numbers are ratios and counts). Model presets: "
             + ", ".join(f"`{p}`" for p in MODEL_PRESETS) + ".", ""]
    sections = [("", SCENARIO)]
    seen = {}
    while sections:
        path, section = sections.pop(0)
        lines += [f"## `{path}`" if path else "## top level", "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        for key, k in section.items():
            sub = k.kind[0] if isinstance(k.kind, list) else k.kind
            child = f"{path}.{key}" if path else key
            if isinstance(sub, Section):
                name = f"{child}[i]" if isinstance(k.kind, list) else child
                if id(sub) in seen:  # a section shared by several keys is listed once
                    kind_text = f"mapping: the same keys as `{seen[id(sub)]}`"
                else:
                    seen[id(sub)] = name
                    sections.append((name, sub))
                    kind_text = f"list of mappings (`{name}` below)" if isinstance(k.kind, list) else "mapping (below)"
            else:
                kind_text = _KINDS[k.kind]
            lines.append(_row(key, kind_text, k))
        lines.append("")
    lines += ["## `workloads.training[i].model` (a model mapping, also `workloads.inference[i].model`)", "",
              "| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [_row(key, _KINDS[k.kind], k) for key, k in MODEL.items()]
    lines += ["", "## `fabric.sites[i].accelerator` (an accelerator mapping)", "",
              "Presets (docs/sources.md, \"Accelerators\"): " + ", ".join(f"`{p}`" for p in hardware.PRESETS)
              + ". A mapping gives every figure, or `like` a preset and the figures that differ.", "",
              "| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [_row(key, _KINDS[k.kind], k) for key, k in ACCELERATOR.items()]
    return "\n".join(lines) + "\n"
