"""One declaration per YAML section: defaults read from the dataclasses, the reference generated from the
same objects, one scalar check, one fabric compiler."""

import dataclasses

import networkx as nx
import numpy as np
import pytest
import yaml

from flowmodel import config
from flowmodel import fabric as fb
from flowmodel._checks import check_number
from flowmodel.optimize import CostModel
from flowmodel.scenario import FailureSet, Routing, Search, SweepGrid
from flowmodel.steptime import Options, Reliability
from flowmodel.traffic import Parallelism, Training

# Keys whose YAML default differs from the dataclass field's on purpose (the YAML shape is not the
# dataclass shape): each with why. Every other key that fills a field must take the field's default.
YAML_DEFAULTS = {
    (id(config.SITE), "scale_up"): "a site without scale_up in YAML has no scale-up domains",
    (id(config.SITE), "scale_out"): "a site without scale_out in YAML is one scale-up domain",
    (id(config.TRAINING), "name"): "a YAML job must be named",
    (id(config.RL_TRAINER), "name"): "an RL workload's trainer may leave out its name (<rl name>/trainer)",
    (id(config.MODEL), "name"): "a YAML model mapping may leave out its label",
    (id(config.SCENARIO), "name"): "a YAML scenario may leave out its name",
    (id(config.OPTIONS), "engine"): "YAML names the engine ('auto'); Options converts the name to Engine.AUTO",
}


def _sections():
    """Every section reachable from the top level, once each."""
    todo, seen = [config.SCENARIO], {}
    while todo:
        section = todo.pop()
        if id(section) in seen:
            continue
        seen[id(section)] = section
        for key in section.values():
            sub = key.kind[0] if isinstance(key.kind, list) else key.kind
            if isinstance(sub, config.Section):
                todo.append(sub)
    return list(seen.values()) + [config.MODEL]


def _field_keys():
    for section in _sections():
        for name, key in section.items():
            if section.target is not None and key.field is not None:
                yield section, name, key, key.field or name


def test_every_key_that_fills_a_field_takes_the_fields_default():
    checked = 0
    for section, name, key, field in _field_keys():
        default = config.of(section.target, field)
        if name in section.from_field:
            assert key.default == default or key.default is default, (section.target, name)
            checked += 1
        elif isinstance(key.kind, config.Section) and key.default == {}:
            # "all defaults": the nested declaration read from nothing is the field's default object
            if default is not config.REQUIRED:
                assert config._read({}, key.kind, name) == default, (section.target, name)
        else:
            assert (id(section), name) in YAML_DEFAULTS, (
                f"{section.target.__name__}.{field}: the YAML key {name!r} declares its own default "
                f"{key.default!r}; leave it to the dataclass (or list why in YAML_DEFAULTS)")
            assert key.default != default, (section.target, name)  # a copy would drift
    assert checked > 80


def test_the_reference_prints_the_dataclass_defaults():
    text = config.reference()
    for section, name, key, field in _field_keys():
        if name in section.from_field:
            default = config.of(section.target, field)
            assert f"| `{name}` | " in text
            assert config._default(key.kind, default) in {row.split(" | ")[2] for row in text.splitlines()
                                                           if row.startswith(f"| `{name}` |")}, name
    # the file on disk is the generated text (tests/test_front_door.py checks the same for the README link)
    with open("docs/config.md") as fh:
        assert fh.read() == text


MINIMAL = """
fabric:
  sites: [{name: a, scale_up: {}, scale_out: {}}]
workloads:
  training:
    - name: job
      model: {layers: 4, hidden: 1024, ffn_hidden: 4096, heads: 8, kv_heads: 8, vocab: 32000, seq_len: 2048}
      parallelism: {tp: 8, pp: 2}
      global_batch: 4
optimize:
  knobs: [{group: a/leaf_up, lower: 1, upper: 4}]
sweep:
  grid: {a/leaf_up: [1, 2]}
failures:
  sites: true
reliability: {}
"""


def test_sections_left_to_their_defaults_parse_to_the_dataclass_defaults():
    data = yaml.safe_load(MINIMAL)
    data["workloads"]["training"][0]["tokens"] = 1e12  # reliability needs a length of training
    sc = config.parse(data)
    site = sc.fleet.sites[0]
    assert site.scale_up == fb.ScaleUp() and site.scale_out == fb.Clos()
    assert site.border_oversubscription == fb.Site("x").border_oversubscription
    assert sc.routing == Routing() and sc.options == Options()
    job = sc.training[0]
    want = Training(job.model, Parallelism(tp=8, pp=2), global_batch=4, ranks=job.ranks, name="job", tokens=1e12)
    assert job == want
    assert sc.optimize == Search(knobs=sc.optimize.knobs) and sc.optimize.cost == CostModel()
    assert sc.sweep == SweepGrid(grid=sc.sweep.grid)
    assert sc.failures == FailureSet(sites=True)
    assert sc.reliability == Reliability()


def test_a_new_section_is_one_declaration():
    @dataclasses.dataclass(frozen=True)
    class Demo:
        count: int = 3
        delay: float = 2e-6

        def __post_init__(self):
            check_number("demo.count", self.count, minimum=1, integer=True)

    demo = config.Section({"count": config.Key("int", "how many"), "delay": config.Key("time", "how long")},
                          target=Demo)
    assert config._read({}, demo, "demo") == Demo()
    assert config._read({"delay": "2ms"}, demo, "demo") == Demo(delay=2e-3)
    with pytest.raises(config.ConfigError, match=r"^demo.cuont: unknown key; did you mean 'count'\?"):
        config._read({"cuont": 1}, demo, "demo")
    with pytest.raises(config.ConfigError, match=r"^demo.count: must be an integer >= 1, got 0"):
        config._read({"count": 0}, demo, "demo")
    with pytest.raises(TypeError, match="FIELD default without a target field"):
        config.Section({"x": config.Key("int", "no target to read a default from")})


@pytest.mark.parametrize("kwargs, value, message", [
    ({}, -1, "x: must be >= 0 and finite, got -1"),
    ({}, float("nan"), "x: must be >= 0 and finite, got nan"),
    ({}, True, "x: must be >= 0 and finite, got True"),
    ({}, "1", "x: must be >= 0 and finite, got '1'"),
    ({"strict": True}, 0.0, "x: must be > 0 and finite, got 0.0"),
    ({"strict": True}, float("inf"), "x: must be > 0 and finite, got inf"),
    ({"minimum": 1, "integer": True}, 0, "x: must be an integer >= 1, got 0"),
    ({"minimum": 1, "integer": True}, 2.0, "x: must be an integer >= 1, got 2.0"),
    ({"integer": True}, False, "x: must be an integer >= 0, got False"),
])
def test_check_number_names_the_field_and_value(kwargs, value, message):
    with pytest.raises(ValueError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        check_number("x", value, **kwargs)


@pytest.mark.parametrize("kwargs, value", [({}, 0), ({}, np.float32(1.5)), ({"strict": True}, 1e-300),
                                           ({"integer": True}, np.int64(0)), ({"minimum": 2, "integer": True}, 2)])
def test_check_number_accepts(kwargs, value):
    assert check_number("x", value, **kwargs) is None  # accepted: no error raised


def test_the_graph_compiles_through_the_table():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2,
                                                          spines_per_pod=2), scale_up=fb.ScaleUp(size=4)),))
    table = fb.build_table(fleet)
    back = fb.FabricTable.from_graph(table.to_graph())
    for name in ("kind", "site", "rank", "domain", "has_domain", "src", "dst"):
        np.testing.assert_array_equal(getattr(back, name), getattr(table, name), err_msg=name)
    for name, column in table.links.items():
        np.testing.assert_array_equal(back.links[name], column, err_msg=name)
    assert back.names == table.names and back.groups == table.groups and back.num_gpus == table.num_gpus


def test_a_hand_made_graph_takes_the_defaults_and_is_checked():
    g = nx.DiGraph()
    g.add_node("g0", kind=fb.Kind.GPU, rank=0)
    g.add_node("g1", kind=fb.Kind.GPU, rank=1)
    g.add_edge("g0", "g1", capacity=2.0)
    g.add_edge("g1", "g0", capacity=3.0, latency=1e-6)
    net, info = fb.compile_fabric(g)
    np.testing.assert_array_equal(net.capacity, [2.0, 3.0])
    np.testing.assert_array_equal(net.latency, [0.0, 1e-6])
    assert info.tier.tolist() == ["link", "link"] and info.direction.tolist() == ["across", "across"]
    assert info.gpus.tolist() == [0, 1] and info.groups == {}
    g.nodes["g1"]["rank"] = 0
    with pytest.raises(ValueError, match=r"^node g1: rank 0 is out of range 0..0 or used twice"):
        fb.compile_fabric(g)
    g.nodes["g1"]["rank"] = 1
    g.edges["g0", "g1"]["capacity"] = "fast"
    with pytest.raises(ValueError, match=r"^link g0->g1: capacity must be > 0 and finite bytes/s, got 'fast'"):
        fb.compile_fabric(g)
    g.edges["g0", "g1"]["capacity"] = -1
    with pytest.raises(ValueError, match=r"^link g0->g1: capacity must be > 0 and finite bytes/s, got -1.0"):
        fb.compile_fabric(g)
    del g.edges["g0", "g1"]["capacity"]
    with pytest.raises(ValueError, match=r"^link g0->g1: capacity must be > 0 and finite bytes/s, got None"):
        fb.compile_fabric(g)
