"""Time to train under failures: the Llama 3 figure, the renewal-reward model against its Monte Carlo
and its exact optimum, gradients, the prepared scenario's exposures and checkpoint traffic, bad input."""

import copy
import json
import math

import jax
import numpy as np
import optax
import pytest
import scipy.optimize
import scipy.special

from flowmodel import cli, config, optimize, reliability, scenario
from flowmodel import steptime as st
from flowmodel.fabric import apply_groups

DAY = 86400.0
LLAMA3_RATE = 419 / (16_384 * 54)  # unexpected interruptions per GPU-day (docs/sources.md, "Failures at scale")

# two 16-GPU buildings joined by one long-haul link, wide enough that the leaves' uplinks bound the job
# (the more so when a spine is down); one TP8 x DP4 job across both
TINY = {
    "name": "tiny",
    "fabric": {"sites": [{"name": "b", "copies": 2, "scale_up": {"size": 8},
                          "scale_out": {"tiers": 2, "gpus_per_leaf": 8, "leaves_per_pod": 2, "spines_per_pod": 2}}],
               "long_haul": [{"a": "b0", "b": "b1", "capacity": "12.8Tbps", "length": "10km"}]},
    "workloads": {"training": [{"name": "job", "model": {"name": "small", "layers": 4, "hidden": 1024,
                                                         "ffn_hidden": 4096, "heads": 8, "kv_heads": 8,
                                                         "vocab": 32000, "seq_len": 2048},
                                "parallelism": {"tp": 8, "dp": 4}, "global_batch": 8, "steps": 200_000}]},
    "reliability": {"gpu": {"rate_per_day": 0.01}, "host": {"rate_per_day": 0.02},
                    "switches": {"spine": {"rate_per_day": 0.01, "repair": "4h"}},
                    "cables": {"nic": {"rate_per_day": 0.001}, "long_haul": {"rate_per_day": 0.01}},
                    "checkpoint": {"bytes_per_parameter": 14}, "storage": {"bandwidth": "10GB/s"},
                    "restart": {"detection": "1min", "rescheduling": "2min"}, "monte_carlo": {"runs": 400}},
}


@pytest.fixture(scope="module")
def tiny():
    model = scenario.prepare(config.parse(copy.deepcopy(TINY)))
    return model, reliability.plan(model)["job"]


# ---- the renewal-reward model -----------------------------------------------------------------------

def test_llama3_rate_gives_its_interruptions():
    # through the plumbing: config units, the job's exposures, its interruption rate; 32 GPUs at the
    # Llama 3 per-GPU rate, scaled to its 16,384 GPUs over 54 days
    data = copy.deepcopy(TINY)
    data["reliability"] = {"gpu": {"rate_per_day": LLAMA3_RATE}, "storage": {"bandwidth": "10GB/s"}}
    model = scenario.prepare(config.parse(data))
    job = reliability.plan(model)["job"]
    (gpu,) = job.interrupting
    assert (gpu.name, gpu.count) == ("gpu", 32) and not job.degrading
    per_gpu_day = job.rate * DAY / 32
    assert LLAMA3_RATE == pytest.approx(4.736e-4, rel=1e-3)
    assert 16_384 * per_gpu_day == pytest.approx(7.76, abs=0.01)
    assert 16_384 * per_gpu_day * 54 == pytest.approx(419, rel=1e-12)


def test_plausible_checkpoint_and_restart_give_over_90_percent_at_llama3_scale():
    rate = 16_384 * LLAMA3_RATE / DAY
    checkpoint = 405e9 * 14 / 1e12          # 5.7 TB written at 1 TB/s
    restart = 120 + 300 + checkpoint          # detect, reschedule, read back
    work = 54 * DAY
    tau = st.optimal_interval(checkpoint, rate)
    effective = work / float(st.expected_wall_time(work, tau, checkpoint, rate, restart=restart))
    assert 0.9 < effective < 0.95, effective
    slow = work / float(st.expected_wall_time(work, st.optimal_interval(600.0, rate), 600.0, rate, restart=1800.0))
    assert slow < 0.8  # ten-minute checkpoints and half-hour restarts: effective time collapses


def test_exact_optimum_is_lambert_w_and_the_minimum():
    rate = 1 / 10_000.0
    for checkpoint in (0.5, 30.0, 600.0, 5000.0):
        a = rate * checkpoint
        lambert = (1 + scipy.special.lambertw(-math.exp(-1 - a)).real) / rate
        tau = float(st.optimal_interval(checkpoint, rate))
        assert tau == pytest.approx(lambert, rel=1e-10)
        grid = scipy.optimize.minimize_scalar(
            lambda t: float(st.expected_wall_time(1e6, t, checkpoint, rate, restart=60.0)),
            bounds=(tau / 10, tau * 10), method="bounded", options={"xatol": 1e-6 * tau})
        assert grid.x == pytest.approx(tau, rel=1e-4)


def test_young_daly_is_within_one_percent_when_the_checkpoint_is_small():
    mtbf = 3 * 3600.0
    small = mtbf * 1e-4
    yd, exact = float(st.young_daly(small, 1 / mtbf)), float(st.optimal_interval(small, 1 / mtbf))
    assert abs(yd / exact - 1) < 0.01, (yd, exact)
    # at a minute's checkpoint the intervals differ by ~3%, the expected times by far less
    yd, exact = float(st.young_daly(60.0, 1 / mtbf)), float(st.optimal_interval(60.0, 1 / mtbf))
    assert 0.02 < yd / exact - 1 < 0.05

    def wall(t):
        return float(st.expected_wall_time(1e7, t, 60.0, 1 / mtbf, restart=300.0))

    assert wall(yd) / wall(exact) - 1 < 1e-3


def test_monte_carlo_mean_matches_the_analytic_expectation():
    rate, checkpoint, interval = 1 / 5000.0, 60.0, 1500.0
    restart, shares = [300.0, 4000.0], [0.9, 0.1]  # two kinds: the slow one waits for a repair
    work = 200 * interval
    runs = st.simulate(work, interval, checkpoint, rate, restart=restart, shares=shares, runs=2000, seed=1)
    mean, se = runs.mean(), runs.std(ddof=1) / math.sqrt(runs.size)
    expected = float(st.expected_wall_time(work, interval, checkpoint, rate, restart=restart, shares=shares))
    assert abs(mean - expected) < 3 * se, (mean, expected, se)
    assert expected > work * 1.1  # failures matter at this rate
    again = st.simulate(work, interval, checkpoint, rate, restart=restart, shares=shares, runs=2000, seed=1)
    np.testing.assert_array_equal(runs, again)  # seeded
    weibull = st.simulate(work, interval, checkpoint, rate, restart=restart, shares=shares, runs=500, seed=1,
                          weibull_shape=0.7)
    assert np.isfinite(weibull).all() and (weibull > work).all()


def test_mean_step_time_counts_elements_down_at_once():
    # 10 elements, each down 1/(1 + 1/(rate*repair)) of the time, each doubling the step
    rate_per_day, repair = 0.5, 4 * 3600.0
    lam = rate_per_day / DAY
    mean = float(st.mean_step_time(1.0, [2.0], [10], [rate_per_day], [repair]))
    assert mean == pytest.approx(1.0 + 10 * lam * repair / (1 + lam * repair))


# ---- on a prepared scenario ---------------------------------------------------------------------------

def test_exposures_interrupt_or_degrade_as_the_fabric_routes(tiny):
    model, job = tiny
    kinds = {e.name: e for e in job.exposures}
    assert kinds["gpu"].count == 32 and kinds["host"].count == 4 and kinds["site_power"].count == 2
    assert kinds["cable long_haul"].interrupts          # the only long-haul link: the job loses its path
    assert kinds["cable nic"].interrupts and kinds["cable nic"].count == 32
    spine = kinds["switch spine"]
    assert not spine.interrupts and spine.count == 4    # the other spine carries the traffic
    assert job.rate * DAY == pytest.approx(32 * 0.01 + 4 * 0.02 + 32 * 0.001 + 0.01)
    # 200 steps per 8 sequences of 2,048 tokens, 14 bytes per parameter
    assert job.steps == 200_000 and job.checkpoint_size == 14 * model.scenario.training[0].model.params


def test_checkpoint_is_fabric_traffic_into_storage(tiny):
    model, job = tiny
    times = jax.jit(lambda n, bandwidth: reliability.checkpoint_times(job, model, n, bandwidth))
    write, read = (float(t) for t in times(model.network, 10e9))
    # 16 GPUs per building write half the checkpoint into its 10 GB/s storage: the storage is the bottleneck
    assert write == pytest.approx(job.checkpoint_size / 2 / 10e9, rel=1e-9)
    assert read == pytest.approx(write, rel=1e-9)
    fast = float(times(model.network, 1e15)[0])
    # then the NICs (50 GB/s each, 16 shards per building over 2 leaves' 2 x 8 NIC links) set the time
    assert fast == pytest.approx(job.checkpoint_size / 32 / 50e9, rel=1e-9)


def test_time_to_train_and_its_gradients(tiny):
    model, job = tiny

    def expected(ratio, interval, bandwidth):  # leaf -> spine oversubscription of both buildings
        net = apply_groups(model.network, model.info, {"b0/leaf_up": ratio, "b1/leaf_up": ratio})
        figures = reliability.time_to_train(job, model, net, interval=interval, storage_bandwidth=bandwidth)
        return figures["expected_s"], figures

    f = jax.jit(jax.value_and_grad(expected, argnums=(0, 1, 2), has_aux=True))  # one program for all of it
    x = (1.0, 1200.0, 10e9)
    (value, figures), grads = f(*x)
    assert 0.9 < float(figures["effective"]) < 1.0
    assert float(figures["optimal_interval_s"]) == pytest.approx(float(st.optimal_interval(figures["checkpoint_s"],
                                                                                           job.rate)))
    assert float(figures["mean_step_s"]) > float(figures["healthy_step_s"])  # a spine down now and then
    for i, grad in enumerate(grads):
        h = x[i] * 1e-4
        up, down = list(x), list(x)
        up[i] += h
        down[i] -= h
        fd = (float(f(*up)[0][0]) - float(f(*down)[0][0])) / (2 * h)
        assert float(grad) == pytest.approx(fd, rel=1e-4), (i, float(grad), fd)
    assert float(grads[0]) > 0 and float(grads[2]) < 0  # thinner uplinks: later; faster storage: sooner


def test_checkpoint_alongside_the_job_pauses_it_less():
    data = copy.deepcopy(TINY)
    del data["reliability"]["switches"]
    data["reliability"]["storage"]["bandwidth"] = "200MB/s"  # a slow write: ~4.6 s
    figures = {}
    for mode in ("pause", "overlap"):
        data["reliability"]["checkpoint"].update(mode=mode, snapshot="0.5s")
        model = scenario.prepare(config.parse(data))
        job = reliability.plan(model)["job"]
        figures[mode] = {k: float(v) for k, v in
                         jax.jit(lambda n, job=job, model=model: reliability.time_to_train(job, model, n))(
                             model.network).items()}
    pause, overlap = figures["pause"], figures["overlap"]
    assert pause["pause_s"] == pause["checkpoint_s"] and overlap["pause_s"] == 0.5
    assert overlap["checkpoint_s"] >= pause["checkpoint_s"] * (1 - 1e-12)  # it shares the fabric with the job
    assert overlap["interval_s"] >= overlap["checkpoint_s"]
    assert overlap["restart_base_s"] == pytest.approx(pause["restart_base_s"] + overlap["checkpoint_s"])
    assert overlap["mean_step_s"] >= overlap["healthy_step_s"]
    assert overlap["effective"] > pause["effective"]


@pytest.mark.slow
def test_optimizer_minimises_expected_time_to_train():
    data = copy.deepcopy(TINY)
    del data["reliability"]["switches"]  # no degraded fabric to differentiate as well: quick
    model = scenario.prepare(config.parse(data))
    job = reliability.plan(model)["job"]
    search, exact = reliability.objective(model, job)
    space = optimize.Space(model.info, tuple(optimize.Knob(f"b{i}/leaf_up", 0.5, 4.0) for i in range(2)),
                           optimize.CostModel())
    res = optimize.minimize(search, model.network, space, exact=exact, steps=3, optimizer=optax.adam(0.1))
    assert res.optimized < res.baseline  # wider leaf uplinks: a shorter step and a shorter run
    assert res.parameters["b0/leaf_up"]["value"] < 1.0


def test_cli_run_reports_time_to_train(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    data = copy.deepcopy(TINY)
    del data["reliability"]["switches"]  # keep it to one failed fabric (the long-haul link): quick
    path.write_text(json.dumps(data))
    assert cli.main(["run", str(path), "--out", str(tmp_path)]) == 0
    assert "effective training time" in capsys.readouterr().out
    result = json.loads((tmp_path / "run.json").read_text())
    for key in ("time_to_train_days", "effective_training_time", "interruptions_per_day", "checkpoint_interval_s",
                "time_to_train_p50_days", "time_to_train_p90_days"):
        assert math.isfinite(result[key]), key
    assert result["time_to_train_p50_days"] <= result["time_to_train_p90_days"]
    figures = result["time_to_train"]["job"]
    assert abs(figures["mc_mean_s"] - figures["expected_s"]) < 3 * figures["mc_stderr_s"]
    assert result["interruptions_per_day"] == pytest.approx(32 * 0.01 + 4 * 0.02 + 32 * 0.001 + 0.01)


# ---- bad input --------------------------------------------------------------------------------------

def _set(data, path, value):
    keys = path.split(".")
    for k in keys[:-1]:
        data = data[int(k)] if isinstance(data, list) else data.setdefault(k, {})
    data[keys[-1]] = value


@pytest.mark.parametrize("path, value, match", [
    ("reliability.gpu.rate_per_day", -1, r"reliability\.gpu\.rate_per_day: must be >= 0 and finite, got -1"),
    ("reliability.switches.spine.repair", "-1h", r"reliability\.switches\.spine\.repair: must be >= 0"),
    ("reliability.restart.detection", "-5s", r"reliability\.restart\.detection: must be >= 0"),
    ("reliability.checkpoint.interval", "0s", r"reliability\.checkpoint\.interval: must be > 0"),
    ("reliability.storage.bandwidth", "-1GB/s", r"reliability\.storage\.bandwidth: must be > 0"),
    ("reliability.cables.optics", {"rate_per_day": 1}, r"reliability\.cables\.optics: unknown key"),
    ("reliability.checkpoint.mode", "async", r"reliability\.checkpoint\.mode: must be one of pause, overlap"),
    ("reliability.monte_carlo.runs", 1, r"reliability\.monte_carlo\.runs: must be an integer >= 2"),
    ("workloads.training.0.steps", 0, r"workloads\.training\[0\]\.steps: must be an integer >= 1, got 0"),
    ("workloads.training.0.tokens", -5.0, r"workloads\.training\[0\]\.tokens: must be > 0"),
    ("workloads.training.0.tokens", 1e9, r"workloads\.training\[0\]\.steps: give tokens or steps, not both"),
])
def test_bad_reliability_input_names_the_key(path, value, match):
    data = copy.deepcopy(TINY)
    _set(data, path, value)
    with pytest.raises(config.ConfigError, match=match):
        config.parse(data)


def test_no_tokens_and_too_small_storage_are_errors():
    data = copy.deepcopy(TINY)
    del data["workloads"]["training"][0]["steps"]
    with pytest.raises(config.ConfigError, match=r"workloads\.training: the reliability section needs a training job"):
        config.parse(data)
    data = copy.deepcopy(TINY)
    data["reliability"] = {"gpu": {"rate_per_day": 0.01}, "storage": {"capacity": "500MB"}}
    model = scenario.prepare(config.parse(data))
    with pytest.raises(ValueError, match=r"reliability\.storage\.capacity: job's checkpoint puts .* on site b"):
        reliability.plan(model)
