"""The notebooks execute, top to bottom, with small parameters appended to their parameters cell."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SMALL = {
    "01_stall.ipynb": "PROMPT_LEN, NUM_DECODES, DECODE_CONTEXT = 8192, 8, 1024",
    "02_chunk_size_sweep.ipynb": "RATES, BUDGETS, CHUNKS, JOBS = [4, 12], [512, 2048], [1024], 1\n"
    "WORKLOAD.update(num_prompts=80, input_len=256, output_len=64, long_prompt_len=8192, long_every=20)",
    "03_calibrate_then_cluster.ipynb": "KERNELS = NETWORK = TRACE = 'absent'   # the shipped samples\nREPLICAS = 2",
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_notebook_executes(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source += "\n" + SMALL[name]
    nbclient.NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
