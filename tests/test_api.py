"""The public surface: names that users and later layers import, and the rule that modules share only
public names."""

import ast
import os
import re

import flowmodel as fm

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def test_public_names():
    surface = {
        fm: ("maxmin_rates", "maxmin_structure", "MaxMinStructure", "smooth_maxmin_rates", "completion_times",
             "completion_events", "Events", "incidence", "Incidence", "link_bytes", "queueing_delay",
             "route_latency", "rtt_weights", "scheduled_bound", "soft_max", "window_limited_rate",
             "Transport", "transport_profile", "kernels", "fabric", "reference", "routing", "traffic", "steptime",
             "optimize", "scenario", "config", "sweep", "resilience", "reliability", "trace"),
        fm.kernels: ("maxmin_rates", "maxmin_structure", "MaxMinStructure", "smooth_maxmin_rates",
                     "completion_times", "completion_events", "Events", "event_count", "incidence", "Incidence",
                     "link_bytes", "queueing_delay", "route_latency", "rtt_weights", "scheduled_bound", "soft_max",
                     "window_limited_rate", "Transport", "PROFILES", "transport_profile", "transport_inputs"),
        fm.fabric: ("ScaleUp", "Clos", "Site", "LongHaul", "Fleet",
                    "build", "compile_fabric", "Network", "FabricInfo", "apply_groups", "fail", "meta_24k",
                    "ring", "full_mesh", "ring_of_regions", "to_networkx"),
        fm.routing: ("Router", "Candidates", "SubFlows", "Unreachable", "ecmp", "spray", "qp_scaling", "wcmp",
                     "route"),
        fm.traffic: ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv",
                     "bus_factor", "Model", "Parallelism", "Training", "Inference", "Background", "llama3_405b",
                     "llama3_405b_training", "read_trace", "Trace", "RankTrace", "TraceError", "TraceWriter"),
        fm.steptime: ("Options", "Congestion", "route_phase", "phase_time", "plan_training", "step_time",
                      "evaluate_fleet", "one_f_one_b", "evaluate_schedule", "Schedule", "ScheduleTimes",
                      "Reliability", "Component", "expected_wall_time", "optimal_interval", "young_daly",
                      "mean_step_time", "simulate", "prepare_trace", "simulate_trace", "trace_makespan",
                      "trace_class_times", "export_training", "read_system", "TraceSystem", "PreparedTrace",
                      "TraceResult"),
        fm.trace: ("Fabric", "run", "export", "is_astra_network"),
        fm.reliability: ("plan", "time_to_train", "checkpoint_times", "monte_carlo", "report", "objective",
                         "Exposure", "JobReliability"),
        fm.optimize: ("split_for_min_mlu", "lp_min_mlu", "minimize", "baseline_value", "Space", "Knob", "CostModel",
                      "grid_search", "random_search", "finish", "refine", "optimality_check", "pareto",
                      "budget_range", "Check", "Finish"),
        fm.scenario: ("Scenario", "Routing", "Search", "SweepGrid", "FailureSet", "Model", "prepare"),
        fm.reference: ("maxmin_rates", "maxmin_violations", "link_loads", "pipeline_schedule"),
    }
    for module, names in surface.items():
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"


# ---- modules share public names only ------------------------------------------------------------

def _sources(*folders):
    for folder in folders:
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            yield from (os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py"))


def _dotted(path, root):
    """flowmodel.x.y of a file under root/flowmodel/ (None for scripts elsewhere), and whether it is a package."""
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[0] != "flowmodel":
        return None, False
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _is_module(dotted):
    path = os.path.join(ROOT, *dotted.split("."))
    return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py"))


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imported(tree, path, root=ROOT):
    """(module imported from, name, name bound, line) of every import of a flowmodel module or name
    (module imported from: None for ``import flowmodel[.x] [as y]``)."""
    name, package = _dotted(path, root)
    here = name if package else (name.rpartition(".")[0] if name else None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "flowmodel":
                    yield None, a.name if a.asname else "flowmodel", a.asname or "flowmodel", node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] == "flowmodel":
                for a in node.names:
                    yield source, a.name, a.asname or a.name, node.lineno


def private_uses(path, root=ROOT):
    """Every place ``path`` imports an underscore-prefixed name from a flowmodel module, or reads one as
    ``module._name``; underscore-named *modules* (``from . import _checks``) are fine. Modules are
    looked up in this checkout; ``root`` is where ``path``'s package starts."""
    tree = ast.parse(open(path).read(), path)
    found, modules = [], {}
    for source, name, alias, line in _imported(tree, path, root):
        if source is None:
            modules[alias] = name
        elif _is_module(f"{source}.{name}"):
            modules[alias] = f"{source}.{name}"
        elif _private(name):
            found.append(f"{path}:{line}: from {source} import {name}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not (isinstance(base, ast.Name) and base.id in modules):
            continue
        module = modules[base.id]
        for attr in reversed(chain):
            if _is_module(f"{module}.{attr}"):
                module = f"{module}.{attr}"
                continue
            if _private(attr):
                found.append(f"{path}:{node.lineno}: {module}.{attr}")
            break
    return found


def test_modules_share_only_public_names():
    found = [use for path in _sources("flowmodel", os.path.join("experiments", "benchmarks"))
             for use in private_uses(path)]
    assert found == [], "\n".join(found)


def test_the_rule_catches_private_imports_and_reads(tmp_path):
    root = tmp_path / "flowmodel" / "kernels"
    root.mkdir(parents=True)
    planted = root / "planted.py"
    planted.write_text("from ._waterfill import _x, fill\nfrom flowmodel.kernels import _waterfill\n"
                       "import flowmodel as fm\nfrom . import _incidence\n"
                       "y = _waterfill.fill, _waterfill._y, fm.kernels._waterfill._z, fm.kernels.maxmin._w\n"
                       "z = _incidence.prepare, fm.kernels.maxmin_rates\n")
    found = [use.split(": ", 1)[1] for use in private_uses(str(planted), str(tmp_path))]
    assert found[0] == "from flowmodel.kernels._waterfill import _x"
    assert sorted(found[1:]) == ["flowmodel.kernels._waterfill._y", "flowmodel.kernels._waterfill._z",
                                 "flowmodel.kernels.maxmin._w"]


def test_kernels_import_nothing_above_them():
    allowed = {"flowmodel._checks", "flowmodel._types"}
    for path in _sources(os.path.join("flowmodel", "kernels")):
        tree = ast.parse(open(path).read(), path)
        for source, name, _, line in _imported(tree, path):
            target = name if source is None else (f"{source}.{name}" if _is_module(f"{source}.{name}") else source)
            assert target.startswith("flowmodel.kernels") or target in allowed, f"{path}:{line}: {target}"


def test_no_memoised_functions():
    # prepared state (link members, compiled programs) lives in objects the caller holds (a
    # cached_property of one is such state), never in a module-level cache, which outlives traces and
    # hides cost
    memo = re.compile(r"lru_cache|functools\.cache\b|@cache\b")
    assert memo.search("@functools.lru_cache") and memo.search("@functools.cache\n") and memo.search("@cache\n")
    assert not memo.search("@functools.cached_property")
    for path in _sources("flowmodel"):
        found = memo.search(open(path).read())
        assert found is None, f"{path}: {found and found.group()}"
