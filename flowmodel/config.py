"""Scenario files: one YAML schema for fabric, workloads, model options and optimizer.

``load(path)`` reads a file into a :class:`Scenario` of flowmodel objects (``Fleet``, ``Training``,
``Inference``, ``Background``, ``Knob`` ...). Units are strings converted once (``400Gbps``,
``50GB/s``, ``10km``, ``2us``). Every error is a ``ConfigError`` (a ``ValueError``) whose message
names the key path and the bad value, e.g. ``fabric.sites[2].scale_out.oversubscription[1]: must be
> 0 and finite, got -1``; unknown keys are rejected with the closest known one. See configs/*.yaml.

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

import difflib
import math
import re
from typing import Any

import yaml

from . import _units
from .fabric import Clos, Fleet, LongHaul, ScaleUp, Site, full_mesh, ring
from .optimize import CostModel, Knob
from .scenario import FailureSet, Routing, Scenario, Search, SweepGrid
from .steptime import CABLES, SWITCHES, Component, Congestion, Options, Reliability
from .traffic import Background, Inference, Model, Parallelism, Training, llama3_405b


class ConfigError(ValueError):
    """A scenario file that cannot be used; the message starts with the key path."""


# A spec maps each key to (kind, default, meaning); kind is a type name, a unit kind, a nested spec
# (dict), or [spec] for a list of them. REQUIRED marks keys without a default. The YAML reference
# (docs/config.md, ``reference()``) is generated from these specs.
REQUIRED = object()

SCALE_UP = {
    "size": ("int", 8, "accelerators per scale-up domain (8 for HGX, 72 for a rack-scale domain)"),
    "bandwidth": ("bandwidth", 400e9, "what each accelerator can send (and receive) inside its domain"),
    "latency": ("time", 936e-9, "accelerator-to-accelerator latency inside the domain"),
    "topology": ("str", "switch", "`switch` (NVSwitch-like) or `full_mesh` (each pair linked directly)"),
}
SCALE_OUT = {
    "tiers": ("int", 2, "2 (leaf, spine) or 3 (leaf, spine, aggregation)"),
    "gpus_per_leaf": ("int", 16, "NIC ports (GPUs) per leaf switch"),
    "leaves_per_pod": ("int", 16, "leaf switches per pod"),
    "spines_per_pod": ("int", 16, "spine switches per pod; every leaf connects to every spine of its pod"),
    "pods": ("int", 1, "pods (3 tiers only; a 2-tier Clos has one pod)"),
    "aggs_per_plane": ("int", 1, "aggregation switches per spine plane (3 tiers)"),
    "nic_bandwidth": ("bandwidth", 50e9, "each GPU's NIC"),
    "oversubscription": ("ratios", None, "per upper tier, (capacity in from below) / (capacity up): "
                                         "`[1, 4]` is 1:1 leaf to spine, 4:1 spine to aggregation; "
                                         "one number for every tier; default non-blocking"),
    "latency": ("time", 1e-6, "per scale-out link"),
    "rail_optimized": ("bool", False, "GPU r of every scale-up domain goes to a leaf of rail r"),
    "radix": ("int", None, "switch port count; every switch's ports must fit in it (unchecked when absent)"),
}
SITE = {
    "name": ("str", REQUIRED, "unique site name; prefixes its nodes and link groups (`b0/spine_up`)"),
    "scale_up": (SCALE_UP, None, "the scale-up domains the site's GPUs are grouped into"),
    "scale_out": (SCALE_OUT, None, "the site's scale-out Clos; absent: the site is one scale-up domain"),
    "border_oversubscription": ("float", 1.0, "(top-tier capacity) / (capacity to the border router), "
                                              "used when long-haul links leave the site"),
    "copies": ("int", 1, "identical sites named `<name>0`, `<name>1`, ..."),
}
LONG_HAUL = {
    "a": ("str", REQUIRED, "one site's name"),
    "b": ("str", REQUIRED, "the other site's name"),
    "capacity": ("bandwidth", REQUIRED, "each way; link group `long_haul/<a>-<b>`"),
    "length": ("length", REQUIRED, "fibre length; latency is length x 4.9 us/km plus extra_latency"),
    "extra_latency": ("time", 0.0, "added to the fibre's latency (regenerators, routers)"),
}
TOPOLOGY = {
    "kind": ("str", REQUIRED, "`ring` or `full_mesh` over every site, in the order listed"),
    "capacity": ("bandwidth", REQUIRED, "each link's capacity, each way"),
    "length": ("length", REQUIRED, "each link's fibre length"),
}
ROUTING = {
    "policy": ("str", "ecmp", "`ecmp` (a hash picks one path per flow), `spray` (every path evenly), "
                              "`qp_scaling` (qps hashed queue pairs per flow), `wcmp` (learnable splits)"),
    "max_paths": ("int", 16, "candidate paths per GPU pair"),
    "site_paths": ("int", 2, "candidate site-level paths between sites"),
    "seed": ("int", 0, "hash seed of ecmp and qp_scaling"),
    "qps": ("int", 4, "queue pairs per flow under qp_scaling"),
}
FABRIC = {
    "sites": ([SITE], REQUIRED, "buildings, campuses or regions"),
    "long_haul": ([LONG_HAUL], None, "scale-across links between sites' border routers"),
    "topology": (TOPOLOGY, None, "long-haul links generated over all sites (added to long_haul)"),
    "routing": (ROUTING, {}, "how every workload is routed"),
}
MODEL = {
    "name": ("str", "model", "label"),
    "layers": ("int", REQUIRED, "transformer layers"),
    "hidden": ("int", REQUIRED, "hidden size"),
    "ffn_hidden": ("int", REQUIRED, "MLP (SwiGLU) hidden size"),
    "heads": ("int", REQUIRED, "attention heads"),
    "kv_heads": ("int", REQUIRED, "key/value heads (GQA)"),
    "vocab": ("int", REQUIRED, "vocabulary size"),
    "seq_len": ("int", REQUIRED, "tokens per sequence"),
    "experts": ("int", 0, "MoE experts per layer (0: dense)"),
    "top_k": ("int", 0, "experts each token is routed to"),
    "moe_ffn_hidden": ("int", None, "each expert's hidden size (default ffn_hidden)"),
    "dtype_bytes": ("int", 2, "bytes per activation and weight element"),
}
PARALLELISM = {
    "tp": ("int", 1, "tensor parallel degree (with sequence parallelism)"),
    "pp": ("int", 1, "pipeline parallel degree"),
    "dp": ("int", 1, "data parallel degree"),
    "cp": ("int", 1, "context parallel degree"),
    "ep": ("int", 1, "expert parallel degree, a divisor of dp"),
    "virtual_stages": ("int", 1, "model chunks per pipeline rank (interleaved 1F1B when > 1)"),
    "order": ("strs", None, "rank order, fastest-varying first (default `[tp, cp, pp, dp]`)"),
    "tp_across_domains": ("bool", False, "allow a TP group to span scale-up domains"),
}
TRAINING = {
    "name": ("str", REQUIRED, "unique workload name"),
    "model": ("model", REQUIRED, "a preset name or a model mapping (below)"),
    "parallelism": (PARALLELISM, REQUIRED, "how the job is split over its GPUs"),
    "global_batch": ("int", REQUIRED, "sequences per step; a multiple of dp x micro_batch"),
    "micro_batch": ("int", 1, "sequences per micro-batch"),
    "efficiency": ("float", 0.5, "fraction of peak_flops the matmuls reach, in (0, 1]"),
    "peak_flops": ("float", 989e12, "per-GPU dense peak, FLOP/s (H100 SXM BF16: 989e12)"),
    "hbm": ("size", 80e9, "memory per GPU; the job's estimated memory per GPU must fit (H100 SXM: 80GB)"),
    "grad_bytes": ("int", 2, "bytes per gradient element in the DP reduction"),
    "algorithm": ("str", "ring", "all-reduce algorithm of the DP reduction: `ring` or `tree`"),
    "first_rank": ("int", 0, "the job's first GPU rank; it runs on the next tp x cp x pp x dp ranks"),
    "tokens": ("float", None, "tokens to train on (for the time to train; write 1.5e+13: YAML needs the sign)"),
    "steps": ("int", None, "steps to train, instead of tokens"),
}
INSTANCES = {
    "first_rank": ("int", REQUIRED, "first GPU rank of the first instance"),
    "instances": ("int", 1, "instances, on consecutive ranks"),
    "tp": ("int", 8, "GPUs per instance"),
}
INFERENCE = {
    "name": ("str", REQUIRED, "unique workload name"),
    "model": ("model", REQUIRED, "a preset name or a model mapping"),
    "prefill": (INSTANCES, REQUIRED, "the prefill instances"),
    "decode": (INSTANCES, REQUIRED, "the decode instances; each request's KV cache moves prefill -> decode"),
    "requests_per_s": ("float", REQUIRED, "request rate of the whole service"),
    "prompt_tokens": ("int", REQUIRED, "tokens per prompt (sets the KV cache size)"),
}
BACKGROUND = {
    "name": ("str", REQUIRED, "unique workload name"),
    "src": ("ints", REQUIRED, "source GPU ranks, one per flow"),
    "dst": ("ints", REQUIRED, "destination GPU ranks, one per flow"),
    "rate": ("bandwidth", REQUIRED, "constant rate of each flow"),
}
WORKLOADS = {
    "training": ([TRAINING], None, "training jobs (the step time is the slowest job's)"),
    "inference": ([INFERENCE], None, "disaggregated inference services (constant load + KV transfer time)"),
    "background": ([BACKGROUND], None, "constant-rate traffic classes (storage, agentic, telemetry)"),
}
OPTIONS = {
    "sharpness": ("float", 64.0, "sharpness of the smooth rates the optimizer searches with"),
    "step_latency": ("time", 0.0, "latency added to every step of every collective (software, NIC)"),
    "window": ("size", None, "bytes in flight per flow; caps each flow at window / RTT"),
    "queueing": ("bool", False, "add M/M/1 queueing delay at each link's mean utilisation"),
    "packet": ("size", None, "packet size of the queueing model (default 4096B; needs queueing)"),
    "buffer": ("size", None, "per-port buffer of the queueing model (default 1,000 packets; needs queueing)"),
    "fleet_tolerance": ("float", 1e-6, "relative change at which the sweeps coupling jobs that share links stop"),
    "fleet_iterations": ("int", 50, "the most sweeps coupling jobs that share links (jobs that share none: none)"),
    "transport": ("str", None, "transport profile fitted against ns-3: tcp (NewReno), newreno, cubic, dctcp"),
}
RENAMED = {"model.alpha": "model.step_latency"}  # old key -> new key: a clear error, never ignored
KNOB = {
    "group": ("str", REQUIRED, "a link group (`b0/spine_up`, `long_haul/b0-b1`, ...; `flowmodel validate` lists them)"),
    "lower": ("knob", REQUIRED, "lower bound: a ratio for oversubscription groups, a bandwidth for capacity groups"),
    "upper": ("knob", REQUIRED, "upper bound, in the same unit"),
    "allowed": ("knobs", None, "values the result is rounded to (port speeds, ratios)"),
}
COST = {
    "per_gbps": ("prices", None, "tier -> price per Gbit/s of capacity (ports and optics)"),
    "per_gbps_km": ("float", 0.0, "price per Gbit/s x km of links with a length (long-haul fibre)"),
}
OPTIMIZE = {
    "knobs": ([KNOB], REQUIRED, "the link groups the optimizer may change"),
    "cost": (COST, {}, "price of capacity"),
    "budget": ("float", None, "the most the knobs' capacity may cost (none: unconstrained)"),
    "steps": ("int", 100, "gradient steps per restart"),
    "learning_rate": ("float", 0.05, "Adam's learning rate, > 0"),
    "restarts": ("int", 1, "random restarts (the best is kept)"),
    "seed": ("int", 0, "seed of the restarts"),
    "objective": ("str", "step_time", "what to minimise: `step_time` (the slowest job), `throughput` (GPU-weighted "
                                      "mean step time of the training jobs, plus kv_weight x each inference "
                                      "service's KV transfer time), `expected` (over the failures section, weighted "
                                      "by probability and healthy_weight), `time_to_train` (the reliability section)"),
    "kv_weight": ("float", 0.0, "under `throughput`: seconds of objective per second of each inference service's "
                                "KV transfer time (0: inference does not enter)"),
    "search": ("str", "smooth", "rates the gradient search runs on: `smooth` (alpha-fair relaxation) or `exact` "
                                "(the exact model's subgradients); results are always reported exact"),
}
SWEEP = {
    "grid": ("grid", REQUIRED, "link group -> list of values; the sweep evaluates every combination"),
    "chunk": ("int", None, "points per vmapped call (default: all at once)"),
    "batching": ("str", "auto", "`auto` (time both ways on the first points, keep the faster), `vmap` or `loop`"),
}
FAILURES = {
    "tiers": ("strs", None, "one failure per cable of these tiers (e.g. `[long_haul]`)"),
    "switch_kinds": ("strs", None, "one failure per switch of these kinds (e.g. `[spine]`)"),
    "sites": ("bool", False, "one failure per site (all its GPUs and links)"),
    "fraction": ("float", None, "a failed cable keeps this fraction of its capacity (none: it is cut)"),
    "probability": ("float", 0.01, "weight of each failure scenario"),
    "healthy_weight": ("float", 1.0, "weight of the healthy fabric"),
}
COMPONENT = {
    "rate_per_day": ("float", 0.0, "failures per component per day (e.g. 2.8e-4 per GPU-day, docs/sources.md)"),
    "repair": ("time", 0.0, "time to repair or replace it: how long a failure the fabric routes around "
                            "degrades the job (an interrupted job restarts on spares without waiting)"),
}
CHECKPOINT = {
    "bytes_per_parameter": ("float", 14.0, "checkpoint bytes per model parameter (bf16 weights, fp32 master "
                                           "weights and Adam moments: 14)"),
    "size": ("size", None, "checkpoint size, instead of bytes_per_parameter"),
    "interval": ("time", None, "work between checkpoints (default: the exact optimum)"),
    "mode": ("str", "pause", "`pause` (the job waits for the write) or `overlap` (the write runs alongside it)"),
    "snapshot": ("time", 0.0, "the job's pause per checkpoint under `overlap` (copy to host memory)"),
}
STORAGE = {
    "bandwidth": ("bandwidth", 100e9, "into (and out of) each site's storage, attached to its top-tier switches"),
    "capacity": ("size", None, "what each site's storage holds (default: unbounded)"),
}
RESTART = {
    "detection": ("time", 0.0, "from an interruption to its detection"),
    "rescheduling": ("time", 0.0, "from detection to the job rescheduled on spares (the checkpoint read follows)"),
}
MONTE_CARLO = {
    "runs": ("int", 1000, "seeded Monte Carlo runs (p50 / p90 of the time to train)"),
    "seed": ("int", 0, "seed of the runs"),
    "weibull_shape": ("float", 1.0, "shape of the inter-arrival times (1: exponential, the analytic model's)"),
}
RELIABILITY = {
    "gpu": (COMPONENT, None, "each GPU (with its HBM); interrupts the job"),
    "host": (COMPONENT, None, "each host of gpus_per_host GPUs; interrupts the job"),
    "nic": (COMPONENT, None, "each GPU's NIC; interrupts the job"),
    "site_power": (COMPONENT, None, "each site the job runs in; the job waits for the repair to restart"),
    "switches": ({k: (COMPONENT, None, f"each {k} switch the job's routes cross") for k in SWITCHES}, None,
                 "per switch kind: interrupts or degrades the job as the fabric re-routes around one"),
    "cables": ({k: (COMPONENT, None, f"each {k} cable the job's routes cross") for k in CABLES}, None,
               "per link tier: interrupts or degrades the job as the fabric re-routes around one"),
    "gpus_per_host": ("int", 8, "GPUs per host"),
    "checkpoint": (CHECKPOINT, {}, "what is saved, how often, and whether the job waits for it"),
    "storage": (STORAGE, {}, "each site's checkpoint storage"),
    "restart": (RESTART, {}, "what an interruption costs besides the lost work and the checkpoint read"),
    "monte_carlo": (MONTE_CARLO, {}, "the seeded simulation beside the analytic expectation"),
}
SCENARIO = {
    "name": ("str", "scenario", "the scenario's name (printed and written to results)"),
    "fabric": (FABRIC, REQUIRED, "sites, long-haul links and routing"),
    "workloads": (WORKLOADS, REQUIRED, "training jobs, inference services, background traffic"),
    "model": (OPTIONS, {}, "options of the step-time model"),
    "optimize": (OPTIMIZE, None, "what `flowmodel optimize` may change, at what cost"),
    "sweep": (SWEEP, None, "what `flowmodel sweep` evaluates"),
    "failures": (FAILURES, None, "what `flowmodel failures` fails"),
    "reliability": (RELIABILITY, None, "failure rates, checkpoints and restarts: `flowmodel run` adds the time to "
                                       "train (needs tokens or steps on a training job)"),
}

MODEL_PRESETS = {"llama3-405b": llama3_405b}


def _fail(where: str, message: str):
    raise ConfigError(f"{where}: {message}")


def _scalar(kind: str, value, where: str):
    if kind in _units.UNITS:
        try:
            return _units.parse(value, kind, where)
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
    if kind == "grid":  # link group -> list of values (ratios, or capacities with units)
        if not isinstance(value, dict) or not value:
            _fail(where, f"expected a mapping of link group -> list of values, got {value!r}")
        return {str(k): _scalar("knobs", v, f"{where}.{k}") for k, v in value.items()}
    if kind == "prices":
        if not isinstance(value, dict):
            _fail(where, f"expected a mapping of tier -> price per Gbit/s, got {value!r}")
        return {str(k): _scalar("float", v, f"{where}.{k}") for k, v in value.items()}
    if kind == "model":
        if isinstance(value, str):
            if value not in MODEL_PRESETS:
                _fail(where, f"unknown model preset {value!r}; known: {', '.join(MODEL_PRESETS)}")
            return MODEL_PRESETS[value]()
        return _make(Model, _read(value, MODEL, where), where)
    raise AssertionError(kind)


def _read(obj, spec: dict, where: str) -> dict:
    """The keys of ``obj`` read against ``spec``: defaults filled, unknown keys rejected."""
    if not isinstance(obj, dict):
        _fail(where, f"expected a mapping, got {obj!r}")
    for key in obj:
        path = f"{where}.{key}" if where else str(key)
        if path in RENAMED:
            _fail(path, f"was renamed to {RENAMED[path]!r} (the same per-step latency, with units)")
        if key not in spec:
            close = difflib.get_close_matches(str(key), list(spec), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(spec)}"
            _fail(f"{where}.{key}" if where else str(key), f"unknown key{hint}")
    out = {}
    for key, (kind, default, _) in spec.items():
        path = f"{where}.{key}" if where else key
        if key not in obj or obj[key] is None:
            if default is REQUIRED:
                _fail(path, "is required")
            # a section left out takes every default of its spec
            out[key] = _read(default, kind, path) if isinstance(kind, dict) and default is not None else default
        elif isinstance(kind, dict):
            out[key] = _read(obj[key], kind, path)
        elif isinstance(kind, list):
            if not isinstance(obj[key], list):
                _fail(path, f"expected a list, got {obj[key]!r}")
            out[key] = [_read(item, kind[0], f"{path}[{i}]") for i, item in enumerate(obj[key])]
        else:
            out[key] = _scalar(kind, obj[key], path)
    return out


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
        if head and head.group(1) == base:  # "scale_out.ratio[1]: ..." under "...scale_out" -> one path
            message = message[len(base):]
            if message.startswith("[") and "[" in last:  # the index is already in the path
                message = message[message.index("]") + 1:]
            raise ConfigError(f"{where}{message}") from None
        raise ConfigError(f"{where}: {message}") from None


def _sites(raw: list, where: str) -> list[Site]:
    sites = []
    for i, s in enumerate(raw):
        path = f"{where}[{i}]"
        su = _make(ScaleUp, s["scale_up"], f"{path}.scale_up") if s["scale_up"] is not None else None
        so = None
        if s["scale_out"] is not None:
            ratios = s["scale_out"]["oversubscription"]
            fields = dict(s["scale_out"], oversubscription=tuple(ratios) if isinstance(ratios, list) else ratios)
            so = _make(Clos, fields, f"{path}.scale_out")
        if s["copies"] < 1:
            _fail(f"{path}.copies", f"must be >= 1, got {s['copies']}")
        names = [s["name"]] if s["copies"] == 1 else [f"{s['name']}{c}" for c in range(s["copies"])]
        for name in names:
            sites.append(_make(Site, dict(name=name, scale_out=so, scale_up=su,
                                          border_oversubscription=s["border_oversubscription"]), path))
    return sites


def _instances(raw: dict, where: str) -> tuple[tuple[int, ...], ...]:
    if raw["instances"] < 1 or raw["tp"] < 1:
        _fail(where, f"instances and tp must be >= 1, got {raw['instances']} and {raw['tp']}")
    first, tp = raw["first_rank"], raw["tp"]
    return tuple(tuple(range(first + i * tp, first + (i + 1) * tp)) for i in range(raw["instances"]))


def parse(data: Any) -> Scenario:
    """A scenario from already-parsed YAML data (a mapping)."""
    if not isinstance(data, dict):
        _fail("scenario", f"expected a mapping of sections ({', '.join(SCENARIO)}), got {type(data).__name__} {data!r}")
    raw = _read(data, SCENARIO, "")
    fab = raw["fabric"]
    sites = _sites(fab["sites"], "fabric.sites")
    links = [_make(LongHaul, dict(a=lh["a"], b=lh["b"], capacity=lh["capacity"], length_km=lh["length"],
                                  extra_latency=lh["extra_latency"]), f"fabric.long_haul[{i}]")
             for i, lh in enumerate(fab["long_haul"] or [])]
    if fab["topology"] is not None:
        topo, names = fab["topology"], [s.name for s in sites]
        kinds = {"ring": ring, "full_mesh": full_mesh}
        if topo["kind"] not in kinds:
            _fail("fabric.topology.kind", f"unknown topology {topo['kind']!r}; known: {', '.join(kinds)}")
        links += list(_make(lambda **kw: kinds[topo["kind"]](names, **kw),
                            dict(capacity=topo["capacity"], length_km=topo["length"]), "fabric.topology"))
    fleet = _make(Fleet, dict(sites=tuple(sites), long_haul=tuple(links)), "fabric")

    wl = raw["workloads"]
    training = []
    for i, t in enumerate(wl["training"] or []):
        path = f"workloads.training[{i}]"
        par_fields = dict(t["parallelism"])
        if par_fields["order"] is None:
            par_fields.pop("order")
        par = _make(Parallelism, par_fields, f"{path}.parallelism")
        first = t.pop("first_rank")
        fields = {k: v for k, v in t.items() if k != "parallelism"}
        training.append(_make(Training, dict(fields, parallelism=par, ranks=tuple(range(first, first + par.size))),
                              path))
    inference = [_make(Inference, dict(name=f["name"], model=f["model"], requests_per_s=f["requests_per_s"],
                                       prompt_tokens=f["prompt_tokens"],
                                       prefill=_instances(f["prefill"], f"workloads.inference[{i}].prefill"),
                                       decode=_instances(f["decode"], f"workloads.inference[{i}].decode")),
                       f"workloads.inference[{i}]") for i, f in enumerate(wl["inference"] or [])]
    background = []
    for i, b in enumerate(wl["background"] or []):
        if len(b["src"]) != len(b["dst"]) or not b["src"]:
            _fail(f"workloads.background[{i}]", f"src and dst need the same non-zero length, got {len(b['src'])} "
                                                f"and {len(b['dst'])}")
        background.append(Background(b["name"], tuple(b["src"]), tuple(b["dst"]), b["rate"]))
    if not training and not inference:
        _fail("workloads", "needs at least one training job or inference service")
    total = fleet.num_gpus
    for i, job in enumerate(training):
        if max(job.ranks) >= total:
            _fail(f"workloads.training[{i}]", f"needs GPUs {min(job.ranks)}..{max(job.ranks)}, the fabric has {total}")

    routing = _make(Routing, fab["routing"], "fabric.routing")
    search = None
    opt = raw["optimize"]
    if opt is not None:
        knobs = tuple(_make(Knob, dict(group=k["group"], lower=k["lower"], upper=k["upper"],
                                       allowed=None if k["allowed"] is None else tuple(k["allowed"])),
                            f"optimize.knobs[{i}]") for i, k in enumerate(opt["knobs"]))
        cost = _make(CostModel, dict(per_gbps=opt["cost"]["per_gbps"] or {}, per_gbps_km=opt["cost"]["per_gbps_km"]),
                     "optimize.cost")
        search = _make(Search, dict(opt, knobs=knobs, cost=cost), "optimize")
    options = raw["model"]
    for key in ("packet", "buffer"):  # they shape the queueing model only: never accept and ignore them
        if options[key] is not None and not options["queueing"]:
            _fail(f"model.{key}", f"is used only with model.queueing: true, got {options[key]} without it")
    congestion = None
    if options["window"] is not None or options["queueing"]:
        queue = {} if options["packet"] is None else {"packet_bytes": options["packet"]}
        congestion = _make(Congestion, dict(window=options["window"], queueing=options["queueing"],
                                            buffer_bytes=options["buffer"], **queue), "model", "congestion")
    model_options = _make(Options, dict(sharpness=options["sharpness"], step_latency=options["step_latency"],
                                        congestion=congestion, fleet_iterations=options["fleet_iterations"],
                                        fleet_tol=options["fleet_tolerance"],
                                        transport=options["transport"]),
                          "model", "options")
    sw = raw["sweep"]
    sweep = None if sw is None else _make(SweepGrid, dict(grid=tuple(sw["grid"].items()), chunk=sw["chunk"],
                                                         batching=sw["batching"]), "sweep")
    fl = raw["failures"]
    failures = None if fl is None else _make(FailureSet, dict(fl), "failures")
    return _make(Scenario, dict(name=raw["name"], fleet=fleet, routing=routing, training=tuple(training),
                                inference=tuple(inference), background=tuple(background), options=model_options,
                                optimize=search, sweep=sweep, failures=failures,
                                reliability=_reliability(raw["reliability"])), "")


def _reliability(r: dict | None) -> Reliability | None:
    if r is None:
        return None

    def component(c: dict | None) -> Component:
        return Component() if c is None else Component(**c)

    def by_name(section: dict | None) -> tuple:
        return tuple((k, component(c)) for k, c in (section or {}).items() if c is not None)

    ck, st, rs, mc = r["checkpoint"], r["storage"], r["restart"], r["monte_carlo"]
    return _make(Reliability, dict(
        gpu=component(r["gpu"]), host=component(r["host"]), nic=component(r["nic"]),
        site_power=component(r["site_power"]), switches=by_name(r["switches"]), cables=by_name(r["cables"]),
        gpus_per_host=r["gpus_per_host"], bytes_per_parameter=ck["bytes_per_parameter"], checkpoint_size=ck["size"],
        checkpoint_mode=ck["mode"], snapshot=ck["snapshot"], interval=ck["interval"],
        storage_bandwidth=st["bandwidth"], storage_capacity=st["capacity"],
        detection=rs["detection"], rescheduling=rs["rescheduling"], weibull_shape=mc["weibull_shape"],
        runs=mc["runs"], seed=mc["seed"]), "reliability")


def override(data: Any, assignment: str) -> Any:
    """``data`` (parsed YAML) with one ``KEY.PATH=VALUE`` applied (``flowmodel --set``): the value is
    read as YAML, so ``400Gbps``, ``8192`` and ``[1, 4]`` mean what they mean in a file; list items
    are indexed (``workloads.training[0].global_batch=8192``); missing sections are created. The
    result is checked by ``parse`` like a file, with the same units and errors."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    tokens = re.findall(r"[^.\[\]]+|\[\d+\]", key)
    if not sep or not key or "".join(t if t.startswith("[") else "." + t for t in tokens).lstrip(".") != key:
        raise ConfigError(f"--set {assignment!r}: expected KEY.PATH=VALUE, e.g. workloads.training[0].global_batch=128")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {key}: cannot read {text!r} ({getattr(e, 'problem', e)})") from None
    data = {} if data is None else data
    node, where = data, ""
    for token, following in zip(tokens, tokens[1:] + [None]):
        if token.startswith("["):
            index = int(token[1:-1])
            if not isinstance(node, list) or index >= len(node):
                size = "is not a list"
                if isinstance(node, list):
                    size = f"has {len(node)} item{'' if len(node) == 1 else 's'}"
                raise ConfigError(f"--set {key}: {where or 'the scenario'} {size}")
            where += token
            if following is None:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {where or 'the scenario'} is not a mapping")
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
    return parse(data)


_KINDS = {"int": "integer", "float": "number", "bool": "true / false", "str": "string",
          "bandwidth": "bandwidth (`400Gbps`, `50GB/s`)", "time": "time (`2us`, `1.5ms`)",
          "length": "length (`30km`, `500m`)", "size": "bytes (`256MiB`, `80GB`)",
          "ratios": "ratio or list of ratios", "ints": "list of integers", "strs": "list of strings",
          "knob": "ratio or bandwidth", "knobs": "list of ratios or bandwidths",
          "grid": "mapping: link group -> list of values", "prices": "mapping: tier -> number",
          "model": "preset name or mapping (`model` below)"}


def _default(kind, default) -> str:
    if default is REQUIRED:
        return "**required**"
    if isinstance(kind, dict) and default == {}:
        return "all defaults"
    if default is None or isinstance(kind, (dict, list)):
        return "-"
    if kind in _units.UNITS:
        return f"`{_units.format_value(default, kind)}`"
    return f"`{str(default).lower() if isinstance(default, bool) else default}`"


def reference() -> str:
    """The YAML reference (docs/config.md): every key of every section, with its type and unit, its
    default and its meaning, generated from the schema."""
    lines = ["# Scenario file reference", "",
             "Generated from the schema in `flowmodel/config.py` (`flowmodel reference > docs/config.md`); "
             "a test keeps the two in step. Units are converted once, when the file is read; unknown keys and "
             "units are errors that name the key. Model presets: "
             + ", ".join(f"`{p}`" for p in MODEL_PRESETS) + ".", ""]
    sections = [("", SCENARIO)]
    seen = {}
    while sections:
        path, spec = sections.pop(0)
        lines += [f"## `{path}`" if path else "## top level", "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        for key, (kind, default, meaning) in spec.items():
            sub = kind[0] if isinstance(kind, list) else kind
            child = f"{path}.{key}" if path else key
            if isinstance(sub, dict):
                name = f"{child}[i]" if isinstance(kind, list) else child
                if id(sub) in seen:  # a spec shared by several keys is listed once
                    kind_text = f"mapping: the same keys as `{seen[id(sub)]}`"
                else:
                    seen[id(sub)] = name
                    sections.append((name, sub))
                    kind_text = f"list of mappings (`{name}` below)" if isinstance(kind, list) else "mapping (below)"
            else:
                kind_text = _KINDS[kind]
            lines.append(f"| `{key}` | {kind_text} | {_default(kind, default)} | {meaning} |")
        lines.append("")
    lines += ["## `workloads.training[i].model` (a model mapping, also `workloads.inference[i].model`)", "",
              "| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {_KINDS[kind]} | {_default(kind, default)} | {meaning} |"
              for key, (kind, default, meaning) in MODEL.items()]
    return "\n".join(lines) + "\n"

