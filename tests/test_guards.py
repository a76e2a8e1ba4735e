"""The static guards (tests/guards.py) pass on the repository and fire on each planted violation."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import guards  # noqa: E402  (tests/ is not a package)

FIXTURES = os.path.join("tests", "guard_fixtures")


def _check(*names, **kwargs):
    paths = [os.path.join(FIXTURES, n) for n in ("conftest.py", *names)]
    return guards.check(paths, **kwargs)


@pytest.fixture(scope="module")
def repo_dead_code():
    """vulture's findings over the repository with nothing allowed: run once for the tests below."""
    pytest.importorskip("vulture", reason="vulture is in the test extras: pip install -e '.[test]'")
    return guards.dead_code(guards.python_files(), allowed={})


def _where(finding):  # "path:line: unused variable 'name' (...)" -> (path, name)
    return finding.split(":")[0], finding.split("'")[1]


def test_the_repository_passes_the_guards(repo_dead_code):
    assert guards.check(guards.python_files(), vulture=False) == []
    allowed = guards.load_allowed()
    assert [f for f in repo_dead_code if _where(f) not in allowed] == []


def test_a_clean_test_module_passes():
    pytest.importorskip("vulture", reason="vulture is in the test extras: pip install -e '.[test]'")
    assert _check("test_clean.py") == []


def test_a_statement_after_return_fires_and_its_assertion_does_not_count():
    found = _check("test_unreachable.py", vulture=False)
    assert len(found) == 2, found
    assert found[0].startswith(f"{FIXTURES}/test_unreachable.py:8: unreachable code after 'return' (line 7)")
    assert "test 'test_values_agree' checks nothing" in found[1]


def test_a_test_without_a_check_fires():
    (found,) = _check("test_no_check.py", vulture=False)
    assert found.startswith(f"{FIXTURES}/test_no_check.py:8: test 'test_prints_only' checks nothing")
    assert guards.main([os.path.join(FIXTURES, "test_no_check.py")]) == 1


def test_dead_code_fires_unless_allowed_with_a_reason():
    pytest.importorskip("vulture", reason="vulture is in the test extras: pip install -e '.[test]'")
    path = os.path.join(FIXTURES, "dead_code.py")
    (found,) = _check("dead_code.py", allowed={})
    assert found.startswith(f"{path}:4: unused variable 'unused_factor'")
    assert _check("dead_code.py", allowed={(path, "unused_factor"): "a callback's signature"}) == []


def test_every_allowed_entry_is_still_needed_and_says_why(repo_dead_code, tmp_path):
    allowed = guards.load_allowed()
    assert all(allowed.values())
    assert {_where(f) for f in repo_dead_code} == set(allowed)
    bad = tmp_path / "allowed.txt"
    bad.write_text("flowmodel/cli.py category\n")
    with pytest.raises(ValueError, match="expected '<path> <name>: <reason>'"):
        guards.load_allowed(str(bad))
