"""Accelerator and model presets: figures equal their cited sources; a site's accelerator fills its
scale-up and NIC defaults and its jobs' peak FLOP/s and HBM; a job across accelerators is timed stage by
stage, limited by its slowest site."""

import copy
import os
import re

import numpy as np
import pytest
import yaml

import flowmodel as fm
from flowmodel import config, hardware, scenario
from flowmodel import fabric as fb
from flowmodel import steptime as st
from flowmodel import traffic as tr

HERE = os.path.dirname(__file__)
H = hardware

# (preset, field, value, source): every figure of every preset, as docs/sources.md "Accelerators" cites it
FIGURES = [
    ("h100_hgx", "bf16_flops", 989.4e12, H.NVIDIA_H100), ("h100_hgx", "fp16_flops", 989.4e12, H.NVIDIA_H100),
    ("h100_hgx", "fp8_flops", 1978.9e12, H.NVIDIA_H100), ("h100_hgx", "tf32_flops", 494.7e12, H.NVIDIA_H100),
    ("h100_hgx", "hbm", 80e9, H.NVIDIA_H100), ("h100_hgx", "hbm_bandwidth", 3.35e12, H.NVIDIA_H100),
    ("h100_hgx", "scale_up_size", 8, H.NVIDIA_HGX), ("h100_hgx", "scale_up_bandwidth", 450e9, H.NVIDIA_H100),
    ("h100_hgx", "nics_per_gpu", 1, H.NVIDIA_HGX), ("h100_hgx", "nic_speed", 50e9, H.NVIDIA_HGX),
    ("b200_hgx", "bf16_flops", 2.25e15, H.NVIDIA_GB200), ("b200_hgx", "fp16_flops", 2.25e15, H.NVIDIA_GB200),
    ("b200_hgx", "fp8_flops", 4.5e15, H.NVIDIA_GB200), ("b200_hgx", "tf32_flops", 1.1e15, H.NVIDIA_GB200),
    ("b200_hgx", "hbm", 180e9, H.NVIDIA_GB200), ("b200_hgx", "hbm_bandwidth", 7.7e12, H.NVIDIA_GB200),
    ("b200_hgx", "scale_up_size", 8, H.NVIDIA_HGX), ("b200_hgx", "scale_up_bandwidth", 900e9, H.NVIDIA_GB200),
    ("b200_hgx", "nics_per_gpu", 1, H.NVIDIA_HGX), ("b200_hgx", "nic_speed", 50e9, H.NVIDIA_HGX),
    ("gb200_nvl72", "bf16_flops", 2.5e15, H.NVIDIA_GB200), ("gb200_nvl72", "fp16_flops", 2.5e15, H.NVIDIA_GB200),
    ("gb200_nvl72", "fp8_flops", 5e15, H.NVIDIA_GB200), ("gb200_nvl72", "tf32_flops", 1.25e15, H.NVIDIA_GB200),
    ("gb200_nvl72", "hbm", 186e9, H.NVIDIA_GB200), ("gb200_nvl72", "hbm_bandwidth", 8e12, H.NVIDIA_GB200),
    ("gb200_nvl72", "scale_up_size", 72, H.NVIDIA_GB200),
    ("gb200_nvl72", "scale_up_bandwidth", 900e9, H.NVIDIA_NVLINK),
    ("gb200_nvl72", "nics_per_gpu", 1, H.MLPERF_GB200), ("gb200_nvl72", "nic_speed", 50e9, H.MLPERF_GB200),
    ("mi300x", "bf16_flops", 1307.4e12, H.AMD_MI300X), ("mi300x", "fp16_flops", 1307.4e12, H.AMD_MI300X),
    ("mi300x", "fp8_flops", 2614.9e12, H.AMD_MI300X), ("mi300x", "tf32_flops", 653.7e12, H.AMD_MI300X),
    ("mi300x", "hbm", 192e9, H.AMD_MI300X), ("mi300x", "hbm_bandwidth", 5.3e12, H.AMD_MI300X),
    ("mi300x", "scale_up_size", 8, H.ROCM_MI300X), ("mi300x", "scale_up_bandwidth", 448e9, H.ROCM_MI300X),
    ("mi300x", "scale_up_topology", "full_mesh", H.ROCM_MI300X),
    ("mi300x", "nics_per_gpu", 1, H.AZURE_MI300X), ("mi300x", "nic_speed", 50e9, H.AZURE_MI300X),
    ("generic", "bf16_flops", 500e12, H.ILLUSTRATIVE), ("generic", "fp16_flops", 500e12, H.ILLUSTRATIVE),
    ("generic", "fp8_flops", 1e15, H.ILLUSTRATIVE), ("generic", "tf32_flops", 250e12, H.ILLUSTRATIVE),
    ("generic", "hbm", 64e9, H.ILLUSTRATIVE), ("generic", "hbm_bandwidth", 2e12, H.ILLUSTRATIVE),
    ("generic", "scale_up_size", 8, H.ILLUSTRATIVE), ("generic", "scale_up_bandwidth", 200e9, H.ILLUSTRATIVE),
    ("generic", "nics_per_gpu", 1, H.ILLUSTRATIVE), ("generic", "nic_speed", 25e9, H.ILLUSTRATIVE),
    ("h100_hgx", "host_bandwidth", 64e9, H.NVIDIA_H100), ("b200_hgx", "host_bandwidth", 64e9, H.PCIE5),
    ("gb200_nvl72", "host_bandwidth", 225e9, H.NVIDIA_GB200), ("mi300x", "host_bandwidth", 64e9, H.AMD_MI300X),
    ("generic", "host_bandwidth", 32e9, H.ILLUSTRATIVE),
    ("h100_hgx", "scale_up_efficiency", 370 / 450, H.NCCL_H100), ("h100_hgx", "nic_efficiency", 0.94, H.NCCL_NDR),
    ("b200_hgx", "scale_up_efficiency", 370 / 450, H.CARRIED), ("b200_hgx", "nic_efficiency", 0.94, H.CARRIED),
    ("gb200_nvl72", "scale_up_efficiency", 370 / 450, H.CARRIED), ("gb200_nvl72", "nic_efficiency", 0.94, H.CARRIED),
]


def _accelerators_section():
    with open(os.path.join(HERE, "..", "docs", "sources.md")) as fh:
        text = fh.read()
    return text.split("## Accelerators", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name, field, value, source", FIGURES, ids=[f"{p}.{f}" for p, f, _, _ in FIGURES])
def test_presets_equal_their_cited_figures(name, field, value, source):
    acc = hardware.preset(name)
    assert getattr(acc, field) == value
    assert acc.source(field) == source
    assert f"**{source}**" in _accelerators_section()  # the short name is cited in full there


def test_every_figure_of_every_preset_is_in_the_table():
    listed = {(p, f) for p, f, _, _ in FIGURES}
    for name, acc in hardware.PRESETS.items():
        assert acc.name == name
        sourced = {f for f, _ in acc.sources}
        assert {(name, f) for f in sourced} <= listed and sourced >= {
            "bf16_flops", "hbm", "hbm_bandwidth", "scale_up_size", "scale_up_bandwidth", "nics_per_gpu", "nic_speed"}
    # the documented table carries the same headline numbers (BF16 dense in TFLOP/s, HBM in GB)
    section = _accelerators_section()
    for name, acc in hardware.PRESETS.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
        bf16, hbm = row.split(" | ")[1], row.split(" | ")[4]
        assert float(re.sub(r"[^\d.]", "", bf16)) * 1e12 == pytest.approx(acc.bf16_flops)
        assert float(re.sub(r"[^\d.]", "", hbm)) * 1e9 == pytest.approx(acc.hbm)


def test_public_surface_and_derived_figures():
    assert fm.hardware is hardware and fm.traffic.mixtral_8x22b is tr.mixtral_8x22b
    gb200 = hardware.preset("gb200_nvl72")
    assert gb200.nic_bandwidth == 50e9 and gb200.peak_flops("fp8") == 5e15
    # the scale-up domain's aggregate: 72 x 1.8 TB/s (both directions) = NVIDIA's 130 TB/s (129.6), to 0.5%
    assert 72 * 2 * gb200.scale_up_bandwidth == pytest.approx(130e12, rel=0.005)
    mi = hardware.preset("mi300x")
    assert 2 * mi.scale_up_bandwidth == 896e9  # seven 128 GB/s links
    with pytest.raises(ValueError, match=r"^accelerator.peak_flops: dtype must be one of bf16, fp8, fp16, tf32"):
        mi.peak_flops("fp4")
    bare = hardware.Accelerator("x", bf16_flops=1e15, hbm="96GB", hbm_bandwidth="4TB/s", scale_up_size=4,
                                scale_up_bandwidth="300GB/s", nic_speed="400Gbps", nics_per_gpu=2)
    assert (bare.hbm, bare.nic_bandwidth) == (96e9, 100e9)
    with pytest.raises(ValueError, match=r"^accelerator.fp8_flops: 'x' has no published fp8 peak"):
        bare.peak_flops("fp8")


@pytest.mark.parametrize("kwargs, message", [
    ({"hbm": -1}, "accelerator.hbm: must be > 0 and finite, got -1"),
    ({"bf16_flops": 0.0}, "accelerator.bf16_flops: must be > 0 and finite, got 0.0"),
    ({"fp8_flops": float("nan")}, "accelerator.fp8_flops: must be > 0 and finite, got nan"),
    ({"scale_up_size": 0}, "accelerator.scale_up_size: must be an integer >= 1, got 0"),
    ({"scale_up_topology": "torus"}, "accelerator.scale_up_topology: must be 'switch' or 'full_mesh', got 'torus'"),
    ({"sources": (("colour", "x"),)}, "accelerator.sources: expected (field, source) pairs"),
])
def test_bad_python_figures_name_the_field(kwargs, message):
    base = dict(name="x", bf16_flops=1e15, hbm=80e9, hbm_bandwidth=3e12, scale_up_size=8, scale_up_bandwidth=4e11,
                nic_speed=50e9)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        hardware.Accelerator(**dict(base, **kwargs))


def test_a_site_takes_a_preset_by_name():
    site = fb.Site("a", accelerator="mi300x")
    assert site.accelerator is hardware.PRESETS["mi300x"]
    assert site.scale_up == fb.ScaleUp()  # in Python the domain stays as given; a scenario file fills it
    with pytest.raises(ValueError, match=r"^sites\[a\].accelerator: unknown preset 'h300'; known: h100_hgx, b200_hgx"):
        fb.Site("a", accelerator="h300")


# Two 8-GPU buildings (one leaf each) 10 km apart.
TWO = """
fabric:
  sites:
    - {name: a, scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 1, spines_per_pod: 1}}
    - {name: b, scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 1, spines_per_pod: 1}}
  long_haul: [{a: a, b: b, capacity: 100Tbps, length: 1km}]
workloads:
  training:
    - name: job
      model: {layers: 8, hidden: 4096, ffn_hidden: 16384, heads: 32, kv_heads: 8, vocab: 32000, seq_len: 4096}
      parallelism: {tp: 8, pp: 2}
      global_batch: 8
"""


def _two(edits=(), data=None):
    data = copy.deepcopy(yaml.safe_load(TWO) if data is None else data)
    for key, value in edits:
        data = config._assign(data, key, copy.deepcopy(value), key)
    return data


def test_the_accelerator_fills_scale_up_and_nic_defaults_and_explicit_keys_win():
    sc = config.parse(_two([("fabric.sites[0].accelerator", "b200_hgx"), ("fabric.sites[1].accelerator", "mi300x"),
                            ("fabric.sites[1].scale_up", {"bandwidth": "300GB/s", "latency": "2us"}),
                            ("fabric.sites[1].scale_out.nic_bandwidth", "800Gbps")]))
    a, b = sc.fleet.sites
    # absent: the preset's domain, its physical bandwidth and the efficiency NCCL reaches on it
    assert a.scale_up == fb.ScaleUp(size=8, bandwidth=900e9, topology="switch", efficiency=370 / 450)
    assert a.scale_out.nic_bandwidth == 50e9 and a.accelerator.name == "b200_hgx"
    assert b.scale_up == fb.ScaleUp(size=8, bandwidth=300e9, latency=2e-6, topology="full_mesh")  # given keys win
    assert b.scale_out.nic_bandwidth == 100e9
    plain = config.parse(_two()).fleet.sites[0]  # no accelerator: the YAML defaults as before
    assert plain.scale_up is None and plain.scale_out.nic_bandwidth == 50e9 and plain.accelerator is None


def test_a_presets_efficiency_goes_with_its_physical_bandwidth_and_never_alone():
    def links(edits):
        sc = config.parse(_two(edits))
        network, info = fb.compile_fabric(fb.build(sc.fleet))
        cap = np.asarray(network.capacity)
        tier, site = np.asarray(info.tier), np.asarray(info.site)
        return {t: float(cap[(tier == t) & (site == "a")].max()) for t in (fb.Tier.SCALE_UP, fb.Tier.NIC)}

    h100 = ("fabric.sites[0].accelerator", "h100_hgx")
    assert links([h100]) == {fb.Tier.SCALE_UP: pytest.approx(370e9), fb.Tier.NIC: pytest.approx(47e9)}
    # a site that gives its own (effective) figures keeps them whole
    given = [h100, ("fabric.sites[0].scale_up", {"bandwidth": "400GB/s"}),
             ("fabric.sites[0].scale_out.nic_bandwidth", "400Gbps")]
    assert links(given) == {fb.Tier.SCALE_UP: pytest.approx(400e9), fb.Tier.NIC: pytest.approx(50e9)}
    # ... unless it gives an efficiency too
    both = given + [("fabric.sites[0].scale_up.efficiency", 0.5), ("fabric.sites[0].scale_out.nic_efficiency", 0.8)]
    assert links(both) == {fb.Tier.SCALE_UP: pytest.approx(200e9), fb.Tier.NIC: pytest.approx(40e9)}
    # the knob a planner tunes stays the physical figure: the links carry it x efficiency
    sc = config.parse(_two([h100]))
    network, info = fb.compile_fabric(fb.build(sc.fleet))
    assert float(fb.group_values(network, info, ["a/scale_up"])["a/scale_up"]) == pytest.approx(450e9)
    for key, value, message in (("scale_up.efficiency", 1.2, "scale_up.efficiency: must be in (0, 1], got 1.2"),
                                ("scale_out.nic_efficiency", 0, "scale_out.nic_efficiency: must be in (0, 1], got 0")):
        with pytest.raises(config.ConfigError, match=re.escape(f"fabric.sites[0].{message}")):
            config.parse(_two([(f"fabric.sites[0].{key}", value)]))


def test_efficiency_never_makes_hardware_cheaper_and_a_new_figure_starts_at_one():
    from flowmodel import optimize

    physical = [("fabric.sites[0].scale_up", {"bandwidth": "450GB/s"}), ("fabric.sites[0].scale_out.nic_bandwidth",
                                                                          "400Gbps")]
    costs = []
    for edits in ([("fabric.sites[0].accelerator", "h100_hgx")], physical):
        sc = config.parse(_two(edits))
        network, info = fb.compile_fabric(fb.build(sc.fleet))
        space = optimize.Space(info, (optimize.Knob("a/scale_up", 100e9, 900e9), optimize.Knob("a/nic", 10e9, 100e9)),
                               optimize.CostModel(per_gbps={"scale_up": 1.0, "nic": 2.0}))
        costs.append(space.cost_at({"a/scale_up": 450e9, "a/nic": 50e9}))
    assert costs[0] == pytest.approx(costs[1], rel=1e-12)  # the same hardware, the same price
    # a custom accelerator that gives its own scale-up figure does not inherit the preset's efficiency for it
    acc = config.parse(_two([("fabric.sites[0].accelerator", {"like": "h100_hgx", "scale_up_bandwidth": "400GB/s"})]))
    acc = acc.fleet.sites[0].accelerator
    assert (acc.scale_up_efficiency, acc.nic_efficiency) == (1.0, 0.94)
    h200 = config.parse(_two([("fabric.sites[0].accelerator", {"like": "h100_hgx", "hbm": "141GB"})]))
    assert h200.fleet.sites[0].accelerator.scale_up_efficiency == pytest.approx(370 / 450)


def test_a_custom_accelerator_is_a_mapping():
    custom = {"like": "h100_hgx", "name": "h200", "hbm": "141GB", "hbm_bandwidth": "4.8TB/s"}
    sc = config.parse(_two([("fabric.sites[0].accelerator", custom)]))
    acc = sc.fleet.sites[0].accelerator
    assert (acc.name, acc.hbm, acc.hbm_bandwidth, acc.bf16_flops) == ("h200", 141e9, 4.8e12, 989.4e12)
    assert sc.training[0].stage_hbm == (141e9, 80e9)  # stage 1 runs on site b, which has no accelerator
    full = {"bf16_flops": 1e15, "hbm": "96GB", "hbm_bandwidth": "4TB/s", "scale_up_size": 4,
            "scale_up_bandwidth": "300GB/s", "nic_speed": "200Gbps", "nics_per_gpu": 2}
    site = config.parse(_two([("fabric.sites[0].accelerator", full)])).fleet.sites[0]
    assert site.accelerator.name == "custom" and site.scale_up.size == 4 and site.scale_out.nic_bandwidth == 50e9


@pytest.mark.parametrize("value, message", [
    ("h200", "fabric.sites[0].accelerator: unknown accelerator preset 'h200'; known: h100_hgx, b200_hgx, "
             "gb200_nvl72, mi300x, generic"),
    ({"like": "h200"}, "fabric.sites[0].accelerator.like: unknown preset 'h200'; known: h100_hgx"),
    ({"like": "h100_hgx", "bf16_flops": -1},
     "fabric.sites[0].accelerator.bf16_flops: must be > 0 and finite, got -1.0"),
    ({"like": "h100_hgx", "hbm": "-80GB"}, "fabric.sites[0].accelerator.hbm: must be > 0, got '-80GB'"),
    ({"like": "h100_hgx", "nic_speed": 400}, "fabric.sites[0].accelerator.nic_speed: 400: needs a unit"),
    ({"like": "h100_hgx", "hbmm": "1GB"}, "fabric.sites[0].accelerator.hbmm: unknown key; did you mean 'hbm'?"),
    ({"hbm": "80GB"}, "fabric.sites[0].accelerator.bf16_flops: is required (or start from a preset with like:"),
    ({"like": "h100_hgx", "scale_up_size": 3}, "fabric.sites[0].scale_up.size: 3 does not divide the site's 8 GPUs"),
    (7, "fabric.sites[0].accelerator: expected a mapping, got 7"),
])
def test_bad_accelerators_name_the_key_path(value, message):
    with pytest.raises(config.ConfigError, match="^" + re.escape(message)):
        config.parse(_two([("fabric.sites[0].accelerator", value)]))


def test_a_job_on_a_b200_site_gets_b200_figures_unless_it_sets_them():
    both = [("fabric.sites[0].accelerator", "b200_hgx"), ("fabric.sites[1].accelerator", "b200_hgx")]
    job = config.parse(_two(both)).training[0]
    assert job.peak_flops == 2.25e15 and job.hbm == 180e9
    np.testing.assert_array_equal(job.rank_peak_flops, [2.25e15, 2.25e15])
    own = config.parse(_two(both + [("workloads.training[0].peak_flops", 1e15)])).training[0]
    assert own.peak_flops == 1e15 and own.stage_peak_flops is None and own.stage_hbm == (180e9, 180e9)
    fp8 = config.parse(_two(both + [("workloads.training[0].model.dtype_bytes", 1)])).training[0]
    assert fp8.peak_flops == 4.5e15  # a 1-byte model computes at the FP8 peak
    plain = config.parse(_two()).training[0]  # no accelerator anywhere: the job's own defaults
    assert (plain.peak_flops, plain.hbm, plain.stage_peak_flops, plain.stage_hbm) == (989e12, 80e9, None, None)


def test_each_stage_is_checked_against_its_own_sites_hbm():
    # Llama 3 70B on TP4 x DP2 x PP2 without sharding (zero_stage 0): ~141 GB of weights (17.6 GB),
    # gradients (17.6 GB) and optimizer state (106 GB) per GPU on either stage
    data = _two([("workloads.training[0].model", "llama3-70b"), ("workloads.training[0].zero_stage", 0),
                 ("workloads.training[0].parallelism", {"tp": 4, "dp": 2, "pp": 2, "order": ["tp", "dp", "pp", "cp"]}),
                 ("workloads.training[0].global_batch", 2)])
    fits = config.parse(_two([("fabric.sites[0].accelerator", "b200_hgx"), ("fabric.sites[1].accelerator", "b200_hgx")],
                             data)).training[0]
    static = fits.static_memory()
    assert 80e9 < static.min() and static.max() < 180e9
    for sites, stage in ((("h100_hgx", "b200_hgx"), 0), (("b200_hgx", "h100_hgx"), 1)):
        edits = [("fabric.sites[0].accelerator", sites[0]), ("fabric.sites[1].accelerator", sites[1])]
        with pytest.raises(config.ConfigError, match=re.escape(
                f"workloads.training[0].hbm: weights, gradients and optimizer state need {static[stage] / 1e9:.1f} GB "
                f"per GPU (tp x pp = 4 x 2, pipeline stage {stage}), more than hbm = 80 GB")):
            config.parse(_two(edits, data))
    with pytest.raises(ValueError, match=r"^training.stage_hbm: needs one value per pipeline stage \(pp = 2\), got 3"):
        tr.Training(tr.llama3_8b(), tr.Parallelism(tp=8, pp=2), global_batch=1, stage_hbm=(1e11,) * 3)
    with pytest.raises(ValueError, match=r"^training.stage_peak_flops\[1\]: must be > 0 and finite, got -1"):
        tr.Training(tr.llama3_8b(), tr.Parallelism(tp=8, pp=2), global_batch=1, stage_peak_flops=(1e15, -1))


# Fabrics that differ only in the accelerators: every link is set explicitly, and fast enough that compute
# dominates the step (the model's layers take ~0.5 ms per micro-batch, its sends microseconds).
FAST_LINKS = [("fabric.sites[0].scale_up", {"bandwidth": "1000TB/s", "latency": "0ns"}),
              ("fabric.sites[1].scale_up", {"bandwidth": "1000TB/s", "latency": "0ns"}),
              ("fabric.sites[0].scale_out.nic_bandwidth", "1000TB/s"),
              ("fabric.sites[1].scale_out.nic_bandwidth", "1000TB/s")]


def _step(first, second):
    sc = config.parse(_two(FAST_LINKS + [("fabric.sites[0].accelerator", first),
                                         ("fabric.sites[1].accelerator", second)]))
    model = scenario.prepare(sc)
    assert len({float(c) for c in model.network.capacity}) <= 3  # the links do not depend on the accelerator
    result = model.fleet().steps["job"]
    return sc.training[0], float(result.step_time), {k: float(v) for k, v in result.breakdown.items()}


def _schedule_only(job):
    """The 1F1B step of ``job`` from its per-stage compute alone (no communication)."""
    layer, _, head = st.compute_times(job)  # a dense model: its MoE-layer time is unused
    p, m = job.parallelism.pp, job.micro_batches
    layers = np.array([len(a) for a in np.array_split(np.arange(job.model.layers), p)])
    f = layers * layer + np.where(np.arange(p) == p - 1, head, 0.0)
    times = st.evaluate_schedule(st.Schedule.build(st.one_f_one_b(p, m)), list(f), list(2 * f), [0.0] * p, [0.0] * p)
    return float(times.free.max()), f


def test_a_heterogeneous_job_is_limited_by_its_slowest_site():
    fast_job, fast, _ = _step("h100_hgx", "h100_hgx")
    slow_job, slow, _ = _step("generic", "generic")
    mixed_job, mixed, parts = _step("h100_hgx", "generic")  # stage 0 on H100, stage 1 on the slower building
    assert mixed_job.stage_peak_flops == (989.4e12, 500e12) and mixed_job.peak_flops == 500e12
    assert fast < mixed < slow
    # each fabric's step is its schedule's arithmetic on the per-stage compute (communication ~0.1%)
    for job, value in ((fast_job, fast), (slow_job, slow), (mixed_job, mixed)):
        assert value == pytest.approx(_schedule_only(job)[0], rel=2e-3)
    # 1F1B: (m - 1) x the slowest stage's forward + backward, plus one pass of every stage. Only stage 0's
    # pass is faster than in the all-slow fabric, so the step equals the all-slow one less 3 (f0_slow - f0_fast)
    m, f_fast, f_slow = mixed_job.micro_batches, _schedule_only(fast_job)[1], _schedule_only(slow_job)[1]
    assert slow - mixed == pytest.approx(3 * (f_slow[0] - f_fast[0]), rel=2e-2)
    assert (slow - mixed) / slow < 1 / (m + 1)  # within one stage's pass of the all-slow step
    # the breakdown's busiest rank is the slow stage: its compute is m x 3 x its forward
    assert parts["compute"] == pytest.approx(m * 3 * _schedule_only(mixed_job)[1][1], rel=1e-9)
    # the slow building first: the bottleneck moves to stage 0 and the step stays between the two
    _, reversed_, parts_r = _step("generic", "h100_hgx")
    assert fast < reversed_ < slow
    assert parts_r["compute"] == pytest.approx(m * 3 * f_slow[0], rel=1e-9)


@pytest.mark.parametrize("preset, params, active", [("llama3-8b", 8.0e9, None), ("llama3-70b", 70.6e9, None),
                                                     ("llama3-405b", 405e9, None), ("mixtral-8x22b", 141e9, 39e9)])
def test_model_presets_have_their_published_sizes(preset, params, active):
    model = config.MODEL_PRESETS[preset]()
    assert model.params == pytest.approx(params, rel=0.02)
    if active is not None:
        inactive = model.layers * (model.experts - model.top_k) * 3 * model.hidden * model.expert_ffn
        assert model.params - inactive == pytest.approx(active, rel=0.02)
    assert preset in config.reference().splitlines()[2]  # listed among the presets in docs/config.md


def test_a_moe_preset_runs_from_a_config():
    sc = config.parse(_two([("workloads.training[0].model", "mixtral-8x22b"),
                            ("workloads.training[0].parallelism", {"tp": 8, "pp": 2, "dp": 1}),
                            ("workloads.training[0].hbm", "1TB")]))
    job = sc.training[0]
    assert (job.model.experts, job.model.top_k, job.model.layers) == (8, 2, 56)


def test_an_exported_trace_keeps_each_stage_at_its_own_compute(tmp_path):
    sc = config.parse(_two([("fabric.sites[0].accelerator", "h100_hgx"), ("fabric.sites[1].accelerator", "generic"),
                            ("workloads.training[0].global_batch", 2)]))
    model = scenario.prepare(sc)
    plan = model.plans[0]
    expected = float(st.step_time(plan, model.network, model.options).step_time)
    summary = st.export_training(plan, str(tmp_path / "job"))
    prepared = st.prepare_trace(tr.read_trace(str(tmp_path / "job")), model.router, gpus=summary["gpus"])
    result = st.simulate_trace(prepared, model.network.capacity, model.network.latency, model.options)
    assert float(result.makespan) == pytest.approx(expected, rel=1e-9)
    layer, _, _ = st.compute_times(plan.job)
    assert layer[1] / layer[0] == pytest.approx(989.4 / 500)  # the slower building's layers take longer
