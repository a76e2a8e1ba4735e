"""The README's Python example runs as written."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


@pytest.mark.slow
def test_readme_example_runs(capsys):
    text = open(README).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "plan_training" in b and "print(" in b)
    exec(compile(example, "README.md", "exec"), {})
    step = float(capsys.readouterr().out.split()[0])
    assert 1.0 < step < 60.0
