"""The README's examples run as written (in a scratch folder that sees the repository's files)."""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("Examples:", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [c.strip() for c in re.sub(r"\\\n\s*", " ", block).splitlines() if c.strip()]


def test_examples_found():
    ex = readme_examples()
    assert len(ex) == 11 and all(c.startswith("chunksim ") for c in ex)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme") / "repo"
    d.mkdir()
    for name in ("experiments", "workloads", "costmodel"):
        (d / name).symlink_to(ROOT / name)
    if SHARED.is_dir():
        (d.parent / "shared").symlink_to(SHARED)
    return d


def test_readme_examples_run_as_written(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    for cmd in readme_examples():
        argv = shlex.split(cmd)[1:]
        if "../shared/data" in cmd and not SHARED.is_dir():
            pytest.skip("../shared/data is absent")
        rc, out, err = run_cli(argv)
        assert rc == 0, (cmd, err[-500:])
    assert len(list((scratch / "results").glob("*.json"))) == 1
    assert (scratch / "cal" / "fitted.yaml").is_file() or not SHARED.is_dir()
    assert os.path.exists(scratch / "experiments" / "examples" / "stall.yaml")
