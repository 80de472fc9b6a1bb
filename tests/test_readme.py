"""Every `chunksim` example in the README and the documentation site runs as written.

An example is a line of a ```bash block that starts with `chunksim ` (or a `&& chunksim …` part
of one), backslash continuations joined. Each page's examples run in order, in a scratch folder of
their own that sees the repository's files, so a page's later examples may read what its earlier
ones wrote (calibrate → cost --hardware cal/fitted.yaml). Examples reading `../shared/data` need
the shared data folder beside the checkout (or CHUNKSIM_SHARED_DIR pointing at it); without it the
page's run stops there and the test is skipped.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CHUNKSIM_SHARED_DIR", ROOT.parent / "shared"))
SETUP = ["pip install -e . && chunksim stall", 'pip install -e ".[test]" && pytest']
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples(page: Path) -> list[str]:
    """The page's chunksim commands, in order."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            out += [p.strip() for p in line.split("&&") if p.strip().startswith("chunksim ")]
    return out


def bash_blocks(page: Path) -> list[list[str]]:
    return [
        [l.strip() for l in b.splitlines() if l.strip()]
        for b in re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    ]


def test_readme_starts_with_the_two_setup_commands():
    # .ci/run greps the README for the second line and runs it as the CI's test command.
    assert bash_blocks(ROOT / "README.md")[0] == SETUP


def test_readme_is_short_and_has_five_examples():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert len(examples(ROOT / "README.md")) == 1 + 5  # `chunksim stall` of the set-up, then five


def test_every_verb_has_a_page_with_examples():
    from experiments.cli import VERBS

    shown = {c.split()[1] for p in PAGES if p.parent != ROOT for c in examples(p)}
    assert set(VERBS) <= shown, sorted(set(VERBS) - shown)


@pytest.fixture
def scratch(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    for name in ("experiments", "workloads", "costmodel"):
        (d / name).symlink_to(ROOT / name)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    return d


@pytest.mark.parametrize("page", [p for p in PAGES if examples(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run_as_written(page, scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    for cmd in examples(page):
        if "../shared/data" in cmd and not SHARED.is_dir():
            pytest.skip(f"{SHARED} is absent: {cmd[:60]}…")
        rc, out, err = run_cli(shlex.split(cmd)[1:])
        assert rc == 0, (cmd, err[-800:])
        assert "Traceback" not in err, (cmd, err[-800:])
