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


# A spec maps each key to (kind, default); kind is a type name, a unit kind, a nested spec (dict),
# or [spec] for a list of them. REQUIRED marks keys without a default.
REQUIRED = object()

SCALE_UP = {"size": ("int", 8), "bandwidth": ("bandwidth", 400e9), "latency": ("time", 936e-9),
            "topology": ("str", "switch")}
SCALE_OUT = {"tiers": ("int", 2), "gpus_per_leaf": ("int", 16), "leaves_per_pod": ("int", 16),
             "spines_per_pod": ("int", 16), "pods": ("int", 1), "aggs_per_plane": ("int", 1),
             "nic_bandwidth": ("bandwidth", 50e9), "oversubscription": ("ratios", None),
             "latency": ("time", 1e-6), "rail_optimized": ("bool", False), "radix": ("int", None)}
SITE = {"name": ("str", REQUIRED), "scale_up": (SCALE_UP, None), "scale_out": (SCALE_OUT, None),
        "border_oversubscription": ("float", 1.0), "copies": ("int", 1)}
LONG_HAUL = {"a": ("str", REQUIRED), "b": ("str", REQUIRED), "capacity": ("bandwidth", REQUIRED),
             "length": ("length", REQUIRED), "extra_latency": ("time", 0.0)}
TOPOLOGY = {"kind": ("str", REQUIRED), "capacity": ("bandwidth", REQUIRED), "length": ("length", REQUIRED)}
ROUTING = {"policy": ("str", "ecmp"), "max_paths": ("int", 16), "site_paths": ("int", 2), "seed": ("int", 0),
           "qps": ("int", 4)}
FABRIC = {"sites": ([SITE], REQUIRED), "long_haul": ([LONG_HAUL], None), "topology": (TOPOLOGY, None),
          "routing": (ROUTING, {})}
MODEL = {"name": ("str", "model"), "layers": ("int", REQUIRED), "hidden": ("int", REQUIRED),
         "ffn_hidden": ("int", REQUIRED), "heads": ("int", REQUIRED), "kv_heads": ("int", REQUIRED),
         "vocab": ("int", REQUIRED), "seq_len": ("int", REQUIRED), "experts": ("int", 0), "top_k": ("int", 0),
         "moe_ffn_hidden": ("int", None), "dtype_bytes": ("int", 2)}
PARALLELISM = {"tp": ("int", 1), "pp": ("int", 1), "dp": ("int", 1), "cp": ("int", 1), "ep": ("int", 1),
               "virtual_stages": ("int", 1), "order": ("strs", None), "tp_across_domains": ("bool", False)}
TRAINING = {"name": ("str", REQUIRED), "model": ("model", REQUIRED), "parallelism": (PARALLELISM, REQUIRED),
            "global_batch": ("int", REQUIRED), "micro_batch": ("int", 1), "efficiency": ("float", 0.5),
            "peak_flops": ("float", 989e12), "grad_bytes": ("int", 2), "algorithm": ("str", "ring"),
            "first_rank": ("int", 0), "tokens": ("float", None), "steps": ("int", None)}
INSTANCES = {"first_rank": ("int", REQUIRED), "instances": ("int", 1), "tp": ("int", 8)}
INFERENCE = {"name": ("str", REQUIRED), "model": ("model", REQUIRED), "prefill": (INSTANCES, REQUIRED),
             "decode": (INSTANCES, REQUIRED), "requests_per_s": ("float", REQUIRED),
             "prompt_tokens": ("int", REQUIRED)}
BACKGROUND = {"name": ("str", REQUIRED), "src": ("ints", REQUIRED), "dst": ("ints", REQUIRED),
              "rate": ("bandwidth", REQUIRED)}
WORKLOADS = {"training": ([TRAINING], None), "inference": ([INFERENCE], None), "background": ([BACKGROUND], None)}
OPTIONS = {"sharpness": ("float", 64.0), "step_latency": ("time", 0.0), "window": ("size", None),
           "queueing": ("bool", False), "packet": ("size", None), "buffer": ("size", None),
           "fleet_iterations": ("int", 8)}
RENAMED = {"model.alpha": "model.step_latency"}  # old key -> new key: a clear error, never ignored
KNOB = {"group": ("str", REQUIRED), "lower": ("knob", REQUIRED), "upper": ("knob", REQUIRED),
        "allowed": ("knobs", None)}
COST = {"per_gbps": ("prices", None), "per_gbps_km": ("float", 0.0)}
OPTIMIZE = {"knobs": ([KNOB], REQUIRED), "cost": (COST, {}), "budget": ("float", None), "steps": ("int", 100),
            "learning_rate": ("float", 0.05), "restarts": ("int", 1), "seed": ("int", 0)}
SWEEP = {"grid": ("grid", REQUIRED), "chunk": ("int", None)}
FAILURES = {"tiers": ("strs", None), "switch_kinds": ("strs", None), "sites": ("bool", False),
            "fraction": ("float", None), "probability": ("float", 0.01), "healthy_weight": ("float", 1.0)}
COMPONENT = {"rate_per_day": ("float", 0.0), "repair": ("time", 0.0)}
RELIABILITY = {"gpu": (COMPONENT, None), "host": (COMPONENT, None), "nic": (COMPONENT, None),
               "site_power": (COMPONENT, None), "switches": ({k: (COMPONENT, None) for k in SWITCHES}, None),
               "cables": ({k: (COMPONENT, None) for k in CABLES}, None), "gpus_per_host": ("int", 8),
               "checkpoint": ({"bytes_per_parameter": ("float", 14.0), "size": ("size", None),
                               "interval": ("time", None), "mode": ("str", "pause"), "snapshot": ("time", 0.0)}, {}),
               "storage": ({"bandwidth": ("bandwidth", 100e9), "capacity": ("size", None)}, {}),
               "restart": ({"detection": ("time", 0.0), "rescheduling": ("time", 0.0)}, {}),
               "monte_carlo": ({"runs": ("int", 1000), "seed": ("int", 0), "weibull_shape": ("float", 1.0)}, {})}
SCENARIO = {"name": ("str", "scenario"), "fabric": (FABRIC, REQUIRED), "workloads": (WORKLOADS, REQUIRED),
            "model": (OPTIONS, {}), "optimize": (OPTIMIZE, None), "sweep": (SWEEP, None),
            "failures": (FAILURES, None), "reliability": (RELIABILITY, None)}

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
    for key, (kind, default) in spec.items():
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
    for key in ("window", "packet", "buffer"):
        if options[key] is not None and options[key] <= 0:
            _fail(f"model.{key}", f"must be > 0 bytes, got {options[key]}")
    for key in ("packet", "buffer"):  # they shape the queueing model only: never accept and ignore them
        if options[key] is not None and not options["queueing"]:
            _fail(f"model.{key}", f"is used only with model.queueing: true, got {options[key]} without it")
    congestion = None
    if options["window"] is not None or options["queueing"]:
        queue = {} if options["packet"] is None else {"packet_bytes": options["packet"]}
        congestion = _make(Congestion, dict(window=options["window"], queueing=options["queueing"],
                                            buffer_bytes=options["buffer"], **queue), "model", "congestion")
    model_options = _make(Options, dict(sharpness=options["sharpness"], step_latency=options["step_latency"],
                                        congestion=congestion, fleet_iterations=options["fleet_iterations"]),
                          "model", "options")
    sw = raw["sweep"]
    sweep = None if sw is None else _make(SweepGrid, dict(grid=tuple(sw["grid"].items()), chunk=sw["chunk"]), "sweep")
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


def load(path: str) -> Scenario:
    """Read and check a scenario file."""
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    return parse(data)
