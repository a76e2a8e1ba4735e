"""The command line as a new user meets it: bad inputs, the output folder, overrides, outputs, guards."""

import ast
import copy
import dataclasses
import json
import os
import re

import jax
import pytest
import yaml

from flowmodel import cli, config, traffic

HERE = os.path.dirname(__file__)
QUICKSTART = os.path.join(HERE, "..", "configs", "quickstart.yaml")


def _quickstart():
    with open(QUICKSTART) as fh:
        return yaml.safe_load(fh)


def _edit(path, value):
    def apply(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return apply


JOB = ["workloads", "training", 0]
BROKEN = {  # name: (edit of the quickstart, extra arguments, what the one line must say)
    "huge capacity": (_edit(["fabric", "long_haul", 0, "capacity"], "1e300Gbps"), [],
                      "fabric.long_haul[0].capacity: must be at most 10Pbps"),
    "negative NIC": (_edit(["fabric", "sites", 0, "scale_out", "nic_bandwidth"], "-400Gbps"), [],
                     "fabric.sites[0].scale_out.nic_bandwidth: must be > 0, got '-400Gbps'"),
    "50,000 km": (_edit(["fabric", "long_haul", 0, "length"], "50000km"), [],
                  "fabric.long_haul[0].length: must be at most 40075km"),
    "unknown unit": (_edit(["fabric", "long_haul", 0, "capacity"], "12Qbps"), [], "unknown bandwidth unit 'Qbps'"),
    "unknown policy": (_edit(["fabric", "routing", "policy"], "nope"), [], "fabric.routing.policy: unknown policy"),
    "negative budget": (_edit(["optimize", "budget"], -5), [], "optimize.budget: must be > 0"),
    "negative learning rate": (_edit(["optimize", "learning_rate"], -1), [], "optimize.learning_rate: must be > 0"),
    "zero steps": (_edit(["optimize", "steps"], 0), [], "optimize.steps: must be an integer >= 1"),
    "unknown knob group": (_edit(["optimize", "knobs", 0, "group"], "b9/spine_up"), [],
                           "optimize.knobs[0].group: unknown link group 'b9/spine_up'; known: b0/border_up"),
    "dp does not divide": (_edit(JOB + ["parallelism", "dp"], 7), [], "global_batch: 64 is not a multiple"),
    "too many GPUs": (_edit(JOB + ["parallelism", "dp"], 16), ["--set", "workloads.training[0].global_batch=128"],
                      "needs GPUs 0..511, the fabric has 256"),
    "405B at TP8 x PP1": (_edit(JOB + ["model"], "llama3-405b"),
                          ["--set", "workloads.training[0].parallelism={tp: 8, dp: 32}"],
                          "workloads.training[0].hbm: weights, gradients and optimizer state need"),
    "absurd global batch": (_edit(JOB + ["global_batch"], 64_000_000_000), [], "workloads.training[0].global_batch"),
    "renamed key": (_edit(["model", "alpha"], 1e-6), [], "model.alpha: was renamed to 'model.step_latency'"),
    "misspelt key": (_edit(JOB + ["global_bach"], 3), [], "did you mean 'global_batch'"),
    "bad --set": (None, ["--set", "nokey"], "--set 'nokey': expected KEY.PATH=VALUE"),
    "--set past a list": (None, ["--set", "fabric.sites[5].name=x"],
                          "--set fabric.sites[5].name: fabric.sites has 1 item"),
    "--out under a file": (None, ["--out", "{tmp}/afile/x"], "--out {tmp}/afile/x: cannot write there"),
    "--out is a file": (None, ["--out", "{tmp}/afile"], "--out {tmp}/afile: is a file, not a folder"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_inputs_exit_2_with_one_line_and_leave_no_file(name, tmp_path, capsys):
    edit, extra, expected = BROKEN[name]
    data = _quickstart()
    if edit is not None:
        edit(data)
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(data))
    (tmp_path / "afile").write_text("")
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    command = "optimize" if "optimize" in name or "knob" in name or "learning" in name or "steps" in name else "run"
    out = [] if "--out" in extra else ["--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert cli.main([command, str(path), *out, *extra, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flowmodel: "), err
    assert expected.replace("{tmp}", str(tmp_path)) in err[0]
    assert "Traceback" not in err[0]
    assert not (tmp_path / "out").exists()  # nothing half-written: the folder is made only after the checks


@pytest.mark.parametrize("text, expected", [("", "the file is empty"), (b"name: caf\xe9\n", "not UTF-8 text"),
                                            ("- a\n- b\n", "scenario: expected a mapping of sections"),
                                            ("fabric: [unclosed\n", "not valid YAML")])
def test_unreadable_files_exit_2_with_the_file_name(text, expected, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and (str(path) in err[0] or "scenario" in err[0])
    assert cli.main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_missing_sections_exit_2(tmp_path, capsys):
    data = _quickstart()
    del data["optimize"], data["sweep"]
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(data))
    for command in ("optimize", "sweep", "failures"):
        assert cli.main([command, str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
        assert f"{command}: the config has no {command} section" in capsys.readouterr().err


def test_set_is_the_same_as_editing_the_file():
    data = _quickstart()
    data["workloads"]["training"][0]["global_batch"] = 128
    data["fabric"]["long_haul"][0]["capacity"] = "1.6Tbps"
    data["model"]["queueing"] = True
    data["failures"] = {"tiers": ["long_haul"]}
    edited = config.parse(copy.deepcopy(data))
    overridden = config.load(QUICKSTART, ["workloads.training[0].global_batch=128",
                                          "fabric.long_haul[0].capacity=1.6Tbps", "model.queueing=true",
                                          "failures.tiers=[long_haul]"])
    assert overridden == edited
    with pytest.raises(config.ConfigError, match="fabric.routing.polcy: unknown key; did you mean 'policy'"):
        config.load(QUICKSTART, ["fabric.routing.polcy=spray"])
    with pytest.raises(config.ConfigError, match="must be at most 10Pbps"):
        config.load(QUICKSTART, ["fabric.long_haul[0].capacity=1e300Gbps"])


def test_run_prints_progress_first_and_writes_only_its_own_file(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", QUICKSTART, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[build fabric]" and "[compile and evaluate]" in lines
    assert sorted(os.listdir(out)) == ["run.json"]
    result = json.loads((out / "run.json").read_text())
    assert result["units"]["_s"] == "seconds" and result["units"]["_Bps"] == "bytes per second"

    def check_units(node, path=""):  # every number's key says its unit (or is a count or a ratio)
        for key, value in node.items():
            if f"{path}.{key}" == ".provenance.config":  # the YAML as written (after --set), units in its values
                continue
            if isinstance(value, dict):
                check_units(value, f"{path}.{key}")
            elif isinstance(value, float) and not path.endswith("_s") and not path.endswith("_bytes"):
                assert key.endswith(("_s", "_Bps", "bytes")) or key in ("efficiency",), f"{path}.{key}"
    check_units(result)
    job = result["jobs"]["llm"]
    assert set(job["memory_per_gpu_bytes"]) == {"weights", "gradients", "optimizer", "activations"}
    # the quickstart must not be silenced: XLA messages are off by default, on with --verbose
    assert jax.config.jax_logging_level == "CRITICAL"


def test_validate_writes_nothing_and_lists_groups(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", QUICKSTART]) == 0
    out = capsys.readouterr().out
    assert "quickstart: valid" in out and "long_haul/b0-b1" in out and "GB per GPU of 80 GB" in out
    assert not os.listdir(tmp_path)
    assert cli.main(["validate", QUICKSTART, "--set", "optimize.knobs[0].group=b7/nic"]) == 2


def test_version(capsys):
    from flowmodel import __version__

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"flowmodel {__version__}"


def test_warnings_for_idle_gpus_and_memory(tmp_path, capsys):
    sc = config.load(QUICKSTART, ["workloads.training[0].parallelism.dp=7", "workloads.training[0].global_batch=56"])
    (idle,) = sc.warnings()
    assert idle == "workloads: 32 of the fabric's 256 GPUs run no training job or inference service (ranks 224-255)"
    assert cli.main(["validate", QUICKSTART, "--set", "workloads.training[0].parallelism.dp=7",
                     "--set", "workloads.training[0].global_batch=56"]) == 0
    assert "flowmodel: warning: workloads: 32 of the fabric's 256 GPUs" in capsys.readouterr().err
    tight = config.load(QUICKSTART, ["workloads.training[0].hbm=4GB"])
    assert any(w.startswith("workloads.training[0].hbm: 'llm' needs about") for w in tight.warnings())


def test_memory_estimate_closed_form():
    # Llama 3 405B at TP8 x PP16 x DP128, v = 1, micro-batch 1 of 8,192 tokens, written out by hand.
    # One layer: attention h*h (Q) + h*2*1024 (K, V: 8 KV heads of 128) + h*h (output) = 570,425,344;
    # SwiGLU MLP 3*h*53,248 = 2,617,245,696; together 3,187,671,040. 126 layers over 16 stages: the first
    # 14 take 8. Rank 0: 8 layers + the embedding (128,256 x 16,384 = 2,101,346,304), over TP8.
    job = traffic.Training(traffic.llama3_405b(), traffic.Parallelism(tp=8, pp=16, dp=128), global_batch=2048)
    params = (8 * 3_187_671_040 + 2_101_346_304) / 8
    assert params == 3_450_339_328
    memory = job.memory()
    assert memory["weights"] == pytest.approx(2 * params)  # bf16
    assert memory["gradients"] == pytest.approx(2 * params / 128)  # zero_stage 2: sharded over DP
    assert memory["optimizer"] == pytest.approx(12 * params / 128)  # fp32 master + 2 Adam moments, sharded
    # Saved per token and layer (elements): norm inputs and outputs 4h, Q h, K and V 2*1024, attention
    # output h, SwiGLU gate, up and product 3*53,248 = 260,096; bf16, over TP8 (sequence parallel).
    per_layer = 260_096 * 2 / 8 * 8192
    assert per_layer == 532_676_608
    assert memory["activations"] == pytest.approx(16 * 8 * per_layer)  # 1F1B: p = 16 micro-batches in flight
    zero1 = dataclasses.replace(job, zero_stage=1).memory()
    assert zero1["gradients"] == pytest.approx(2 * params) and zero1["optimizer"] == memory["optimizer"]
    zero0 = dataclasses.replace(job, zero_stage=0).memory()
    assert zero0["optimizer"] == pytest.approx(12 * params)
    full = dataclasses.replace(job, recompute="full").memory()  # layer inputs, plus one layer being recomputed
    assert full["activations"] == pytest.approx(16 * 8 * 16384 * 2 / 8 * 8192 + per_layer)
    with pytest.raises(ValueError, match="training.hbm: weights, gradients and optimizer state need 279.0 GB"):
        traffic.Training(traffic.llama3_405b(), traffic.Parallelism(tp=8, dp=4), global_batch=8)
    for field, value, message in (("zero_stage", 3, "training.zero_stage: must be one of 0, 1, 2, got 3"),
                                  ("recompute", "selective", "training.recompute: must be one of none, full"),
                                  ("optimizer_bytes", -1, "training.optimizer_bytes: must be an integer >= 0")):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(job, **{field: value})


def test_reference_matches_the_schema():
    with open(os.path.join(HERE, "..", "docs", "config.md")) as fh:
        assert fh.read() == config.reference(), "docs/config.md is stale: run `flowmodel reference > docs/config.md`"
    text = config.reference()
    specs = [config.SCENARIO]
    while specs:
        spec = specs.pop()
        for key, k in spec.items():
            assert f"| `{key}` |" in text and k.meaning, key
            sub = k.kind[0] if isinstance(k.kind, list) else k.kind
            if isinstance(sub, dict):
                specs.append(sub)
    with open(os.path.join(HERE, "..", "README.md")) as fh:
        assert "docs/config.md" in fh.read()


def _captured(monkeypatch):
    from flowmodel import plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    return plots, figures


def test_breakdown_colours_are_fixed_per_component_and_the_legend_is_outside(monkeypatch):
    plots, figures = _captured(monkeypatch)
    plots.breakdown_bars({"a": {"dp": 1.0, "compute": 2.0, "tp": 0.5}}, "x.png")
    plots.breakdown_bars({"b": {"compute": 2.0, "tp": 0.5, "pipeline": 0.2, "dp": 1.0}}, "y.png")
    for fig in figures:
        ax = fig.axes[0]
        colours = {p.get_label(): p.patches[0].get_facecolor() for p in ax.containers}
        for part, colour in colours.items():
            import matplotlib.colors

            assert matplotlib.colors.to_hex(colour) == plots.COMPONENT_COLOURS[part]
        assert [c.get_label() for c in ax.containers][0] == "compute"  # the step's order, not the dict's
        assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1


def test_sweep_plot_has_log_axes_in_the_config_units_and_distinct_lines(monkeypatch):
    import numpy as np

    plots, figures = _captured(monkeypatch)
    x = np.array([400, 800, 1600, 3200] * 2) * 1e9 / 8
    table = {"long_haul/a-b": x, "a/spine_up": np.repeat([1.0, 2.0], 4), "step_time_s": 1 / x + 1e-12}
    plots.sweep_lines(table, ["long_haul/a-b", "a/spine_up"], "step_time_s", "s.png",
                      units={"long_haul/a-b": "bytes/s", "a/spine_up": "ratio"})
    ax = figures[0].axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "long_haul/a-b (Gbps)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["400", "800", "1600", "3200"]
    lines = ax.get_lines()
    assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == len(lines) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a/spine_up = 1:1", "a/spine_up = 2:1"]


def test_loss_plot_shows_the_exact_values(monkeypatch):
    plots, figures = _captured(monkeypatch)
    plots.loss_curve([0.8, 0.6, 0.65], "l.png", exact={"baseline (exact)": 0.66, "result, rounded (exact)": 0.53})
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert labels == ["searched objective (smooth rates)", "baseline (exact): 0.66 s",
                      "result, rounded (exact): 0.53 s"]


# The README and the docs pages as a reader follows them: links land, commands parse, examples name the real API.
ROOT = os.path.join(HERE, "..")
DOCS = os.path.join(ROOT, "docs")
PAGES = ["README.md"] + sorted(f"docs/{f}" for f in os.listdir(DOCS) if f.endswith(".md"))


def _text(page):
    with open(os.path.join(ROOT, page)) as fh:
        return fh.read()


def _blocks(page, lang):
    return re.findall(rf"```{lang}\n(.*?)```", _text(page), flags=re.S)


def _anchor(heading):  # GitHub's heading slugs
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_docs_page_is_linked_from_the_readme():
    readme = _text("README.md")
    for page in PAGES[1:]:
        assert f"]({page})" in readme, page


def _links(page):
    return re.findall(r"\]\(([^)\s]+)\)", _text(page))


@pytest.mark.parametrize("page", [p for p in PAGES if _links(p)])
def test_links_land_on_a_file_and_a_heading(page):
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = os.path.join(ROOT, os.path.dirname(page), target) if target else os.path.join(ROOT, page)
        assert os.path.exists(path), f"{page}: {link} does not exist"
        if anchor:
            with open(path) as fh:
                headings = [_anchor(h) for h in re.findall(r"(?m)^#+ (.*)$", fh.read())]
            assert anchor in headings, f"{page}: {link} names no heading of {target or page}"


def _commands(page):
    """The command lines of a page's bash blocks, continuation lines joined and comments dropped."""
    lines = []
    for block in _blocks(page, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p, "bash")])
def test_commands_parse_and_name_files_that_exist(page, capsys):
    import shlex

    parser = cli._parser()
    for line in _commands(page):
        for command in line.split(" && "):
            words = shlex.split(command.replace("PYTHONPATH=. ", ""))
            if words[0] == "flowmodel":
                parser.parse_args(words[1:])  # argparse exits 2 on an unknown command or option
            elif words[0] == "python" and words[1] != "-m":
                assert os.path.exists(os.path.join(ROOT, words[1])), f"{page}: {command}"
            for word in words:
                if word.startswith(("configs/", "experiments/", "tests/")):
                    assert os.path.exists(os.path.join(ROOT, word)), f"{page}: {command}: no {word}"
    assert capsys.readouterr().err == ""


def _aliases():
    """The names the examples import flowmodel's modules as (one meaning per name across every page)."""
    aliases = {}
    for page in PAGES:
        for block in _blocks(page, "python"):
            for node in ast.walk(ast.parse(block)):
                names = []
                if isinstance(node, ast.Import):
                    names = [(a.asname or a.name, a.name) for a in node.names if a.name.startswith("flowmodel")]
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flowmodel"):
                    names = [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]
                for alias, module in names:
                    assert aliases.setdefault(alias, module) == module, (page, alias, module, aliases[alias])
    return aliases


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p, "python")])
def test_python_examples_name_the_real_api(page):
    import importlib
    import inspect

    modules = {alias: importlib.import_module(name) for alias, name in _aliases().items()}
    checked = 0
    for block in _blocks(page, "python"):
        tree = ast.parse(block)  # every example is valid Python
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            chain, func = [], node.func
            while isinstance(func, ast.Attribute):
                chain.insert(0, func.attr)
                func = func.value
            if not (isinstance(func, ast.Name) and func.id in modules and chain):
                continue
            obj = modules[func.id]
            for attr in chain:
                assert hasattr(obj, attr), f"{page}: {func.id}.{'.'.join(chain)}: no '{attr}'"
                obj = getattr(obj, attr)
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):  # a compiled or wrapped callable without a signature
                continue
            if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                unknown = {k.arg for k in node.keywords if k.arg} - set(params)
                assert not unknown, f"{page}: {func.id}.{'.'.join(chain)} takes no {sorted(unknown)}"
            checked += 1
    assert checked > 0, f"{page}: its examples call nothing of flowmodel's"
