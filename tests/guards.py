"""Static guards that keep the tests able to fail and the code free of dead statements.

Three checks, each printed as ``path:line: what``:

- unreachable code: a statement after ``return``, ``raise``, ``continue`` or ``break`` in the same block;
- dead code at full confidence (vulture ``--min-confidence 100``), less the entries of
  ``tests/dead_code_allowed.txt``, each kept there with its reason;
- a test function with no check: no ``assert`` and no checking call (``pytest.raises``, ``pytest.skip``,
  ``np.testing.assert_*``, ``check_grads``...), in its own body or in any helper it calls that is defined in
  its module or in ``tests/conftest.py``. Unreachable statements do not count.

Run ``python tests/guards.py`` from the repository root (``.ci/run`` does, before pytest); the exit status is
1 when anything is found. ``tests/test_guards.py`` runs the same checks over the repository and over planted
violations in ``tests/guard_fixtures/``.
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("flowmodel", "tests", "experiments")
FIXTURES = os.path.join("tests", "guard_fixtures")  # planted violations: checked only by tests/test_guards.py
ALLOWED = os.path.join(ROOT, "tests", "dead_code_allowed.txt")

TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
# calls that check something or end a test on purpose: pytest.raises/warns/skip/fail/xfail/importorskip,
# np.testing.assert_*, unittest-style self.assert*, jax.test_util.check_grads, doctest's failure count
CHECK_ATTRS = {"raises", "warns", "deprecated_call", "skip", "fail", "xfail", "importorskip", "check_grads"}


def python_files(root: str = ROOT) -> list[str]:
    """The repository's Python files, less the planted fixtures, as paths relative to ``root``."""
    found = []
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            rel = os.path.relpath(folder, root)
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and os.path.join(rel, d) != FIXTURES)
            found += [os.path.join(rel, f) for f in sorted(files) if f.endswith(".py")]
    return found


def _blocks(tree: ast.AST):
    """Every statement list in the tree (bodies, else branches, handlers, match cases)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def unreachable(path: str, tree: ast.AST) -> list[str]:
    """Statements that follow a return/raise/continue/break in the same block."""
    found = []
    for block in _blocks(tree):
        for stmt, after in zip(block, block[1:]):
            if isinstance(stmt, TERMINAL):
                kind = type(stmt).__name__.lower()
                found.append(f"{path}:{after.lineno}: unreachable code after '{kind}' (line {stmt.lineno})")
                break
    return found


def _reachable(node: ast.AST):
    """ast.walk that leaves out statements after a return/raise/continue/break in their block."""
    todo = [node]
    while todo:
        node = todo.pop()
        yield node
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        todo.append(item)
                    if isinstance(item, TERMINAL) and field in ("body", "orelse", "finalbody"):
                        break
            elif isinstance(value, ast.AST):
                todo.append(value)


def _is_check(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in CHECK_ATTRS or name.startswith("assert")
    return False


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level functions and the methods of module-level classes, by name."""
    functions = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            functions.update({n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    return functions


def _tests(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and n.name.startswith("test"))


def tests_without_checks(path: str, tree: ast.Module, helpers: dict[str, ast.AST] | None = None) -> list[str]:
    """Test functions that check nothing, following the helpers they call (this module's, then ``helpers``)."""
    known = {**(helpers or {}), **_functions(tree)}
    checks: dict[str, bool] = {}

    def checked(func: ast.AST, seen: set[str]) -> bool:
        called = []
        for node in _reachable(func):
            if _is_check(node):
                return True
            if isinstance(node, ast.Call):
                f = node.func
                called.append(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None)
        for name in called:
            if name in known and name not in seen:
                if name not in checks:
                    checks[name] = checked(known[name], seen | {name})
                if checks[name]:
                    return True
        return False

    return [f"{path}:{t.lineno}: test '{t.name}' checks nothing (no assert or checking call, nor in its helpers)"
            for t in _tests(tree) if not checked(t, {t.name})]


def load_allowed(path: str = ALLOWED) -> dict[tuple[str, str], str]:
    """``tests/dead_code_allowed.txt``: ``<path> <name>: <reason>`` per line; every entry must give a reason."""
    allowed = {}
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where, _, reason = line.partition(":")
            parts = where.split()
            if len(parts) != 2 or not reason.strip():
                raise ValueError(f"{path}:{number}: expected '<path> <name>: <reason>', got {line!r}")
            allowed[tuple(parts)] = reason.strip()
    return allowed


def dead_code(paths: list[str], root: str = ROOT, allowed: dict | None = None) -> list[str]:
    """vulture at 100% confidence (unused arguments and variables, unreachable code), less the allowed entries."""
    import vulture

    v = vulture.Vulture()
    v.scavenge([os.path.join(root, p) for p in paths])
    allowed = load_allowed() if allowed is None else allowed
    found = []
    for item in v.get_unused_code(min_confidence=100):
        rel = os.path.relpath(str(item.filename), root)
        if item.typ == "unreachable_code":  # the AST check above reports it, with the statement that ends the block
            continue
        if (rel, item.name) not in allowed:
            found.append(f"{rel}:{item.first_lineno}: {item.message} (vulture, 100% confidence)")
    return found


def check(paths: list[str], root: str = ROOT, *, vulture: bool = True, allowed: dict | None = None) -> list[str]:
    """All three guards over ``paths`` (relative to ``root``); files named test_*.py are test modules."""
    trees = {}
    for p in paths:
        with open(os.path.join(root, p)) as fh:
            trees[p] = ast.parse(fh.read(), filename=p)
    found = []
    for p, tree in trees.items():
        found += unreachable(p, tree)
        name = os.path.basename(p)
        if name.startswith("test_") and name.endswith(".py"):
            conftest = os.path.join(os.path.dirname(p), "conftest.py")
            helpers = _functions(trees[conftest]) if conftest in trees else {}
            found += tests_without_checks(p, tree, helpers)
    if vulture:
        found += dead_code(paths, root, allowed)
    return found


def main(argv: list[str] | None = None) -> int:
    paths = argv or python_files()
    found = check(paths)
    for line in found:
        print(line)
    print(f"guards: {len(found)} finding(s) in {len(paths)} files", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
