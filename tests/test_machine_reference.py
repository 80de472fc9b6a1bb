"""The machine reference must stay frozen: it is the unit every speed figure is scaled by, so a
change to its loop (or an import of project code into it) would move every figure silently."""

import ast
import hashlib
import inspect
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import machine  # noqa: E402


def test_reference_loop_imports_no_project_code():
    tree = ast.parse((BENCH / "machine.py").read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots <= {"__future__", "heapq", "math", "os", "random", "time", "collections"}


def test_reference_loop_is_the_frozen_one():
    mean_e2e, last, steps = machine.reference_loop()
    assert steps == 8977 and abs(last - 199.80726030203206) < 1e-9 and abs(mean_e2e - 4.575439347467332) < 1e-12


def test_reference_loop_source_is_unchanged():
    """Its outputs pin what it computes, not what it costs: an edit that adds work but keeps the
    results would pass the test above, so its source is pinned too. Changing it means measuring
    TO_OLD_UNITS again (benchmarks/machine.py says how)."""
    src = inspect.getsource(machine._Request) + inspect.getsource(machine.reference_loop)
    assert (
        hashlib.sha256(src.encode()).hexdigest() == "e0b214c461006e868be5b4c2be7dcfb8b009928200a65d989fd46da3b1f4f51c"
    )


def test_reference_is_in_old_units():
    calls = iter([0.0, 1.0])
    assert machine.reference_s(1, clock=lambda: next(calls)) == machine.TO_OLD_UNITS
