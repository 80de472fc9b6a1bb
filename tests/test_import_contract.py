"""The module map's rules (docs/module-map.md), checked on the source: the import contracts in
pyproject.toml ([tool.importlinter]: costmodel imports nothing of simcore or policies, policies
no simcore engine module, simcore/stepping.py no fast-forward module); SimPy's internals touched
only in simcore/clock.py; routers read only a replica's public API."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simcore", "policies", "costmodel", "workloads", "experiments")
SIMPY_PRIVATE = {"_now", "_queue", "_eid", "_ok", "_value", "_target", "_defused", "_resume"}


def sources():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    out = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def _simpy_objects(node: ast.Attribute) -> bool:
    """Whether `node` reads a private attribute of an environment, event or process."""
    if node.attr not in SIMPY_PRIVATE:
        return False
    base = ast.unparse(node.value).split(".")[-1]
    return base in ("env", "environment", "event", "idle", "process", "wake", "_wake") or base.endswith("_env")


def test_simpy_internals_only_in_clock():
    found = []
    for path in sources():
        if path == ROOT / "simcore" / "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _simpy_objects(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_routers_read_no_private_replica_state():
    tree = ast.parse((ROOT / "simcore" / "router.py").read_text())
    found = [
        f"router.py:{n.lineno} {ast.unparse(n)}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr.startswith("_") and ast.unparse(n.value) != "self"
    ]
    assert not found, found


def test_the_checks_see_a_breach(tmp_path):
    """Not vacuous: the SimPy check flags what it is meant to flag."""
    node = ast.parse("self.env._now").body[0].value
    assert _simpy_objects(node)
    assert not _simpy_objects(ast.parse("self._queue").body[0].value)
