"""The README's Python example runs as written and prints what the README says."""

import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
README = os.path.join(ROOT, "README.md")


@pytest.mark.slow
def test_readme_example_runs_and_prints_its_output(capsys, monkeypatch):
    text = open(README).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "sc.prepare" in b and "print(" in b)
    shown = re.match(r"```\n\s*```\n(.*?)```", text.split(example, 1)[1], flags=re.S).group(1)  # the output block
    monkeypatch.chdir(ROOT)
    exec(compile(example, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == shown.strip()
