"""Where SGLang's hybrid radix cache takes a state from an extend (marker `conformance`).

Drives SGLang 0.5.23's own ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend (the
extra_buffer strategy's per-request tracking) on CPU, with its runtime settings stubbed (grid,
no decode-context parallel, not lazy), and compares the state depth it records
(``mamba_last_track_seqlen``, or none when ``track_mask`` is off) with simcore's ``tracked_end``.
Skips unless SGLang is importable.
"""

import importlib.util
import types

import numpy as np
import pytest

pytestmark = pytest.mark.conformance

if importlib.util.find_spec("sglang") is None:
    pytest.skip("SGLang is not installed: pip install 'chunksim[conformance]'", allow_module_level=True)

from simcore.mamba_radix_cache import tracked_end  # noqa: E402

from .sglang_engine import _light_import  # noqa: E402


@pytest.fixture(scope="module")
def prepare(request):
    _light_import()
    import sglang.srt.managers.schedule_batch as sb

    def run(prefix, extend, branching, grid):
        mp = pytest.MonkeyPatch()
        mp.setattr(sb, "mamba_cache_chunk_size", lambda: grid)
        mp.setattr(sb, "mamba_checkpoint_grid", lambda page: grid)
        mp.setattr(sb, "get_parallel", lambda: types.SimpleNamespace(dcp_enabled=False))
        lazy = types.SimpleNamespace(mamba=types.SimpleNamespace(enable_mamba_extra_buffer_lazy=False))
        mp.setattr(sb, "get_exec", lambda: lazy)
        kv = types.SimpleNamespace(mamba_next_track_idx=0, mamba_last_track_idx=0, mamba_last_track_seqlen=None)
        req = types.SimpleNamespace(
            prefix_len=prefix, extend_end=prefix + extend, extend_len=extend, kv=kv, mamba_branching_seqlen=branching
        )
        batch = types.SimpleNamespace(
            model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(mamba_chunk_size=64)),
            tree_cache=types.SimpleNamespace(page_size=1),
            req_to_token_pool=types.SimpleNamespace(get_mamba_ping_pong_other_idx=lambda i: 1 - i),
        )
        try:
            entry = sb.ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend(batch, req)
        finally:
            mp.undo()
        return kv.mamba_last_track_seqlen if entry.track_mask else None

    return run


def test_tracked_state_matches_sglang(prepare):
    """500 extends: random prefixes, lengths from under a grid to several chunks, and branching
    points before, inside (aligned or not) and after the extend."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        grid = int(rng.choice([64, 128, 256]))
        prefix = int(rng.integers(0, 40)) * grid + int(rng.integers(0, grid)) * int(rng.random() < 0.3)
        extend = int(rng.integers(1, 20_000))
        kind = rng.integers(0, 4)
        if kind == 0:
            branching = None
        elif kind == 1:  # aligned from the prefix, maybe inside the extend
            branching = prefix + int(rng.integers(0, extend // grid + 2)) * grid
        elif kind == 2:  # anywhere
            branching = int(rng.integers(0, prefix + extend + 2 * grid))
        else:
            branching = prefix
        want = prepare(prefix, extend, branching, grid)
        got = tracked_end(prefix, prefix + extend, branching, grid, "extra_buffer")
        assert got == want, (prefix, extend, branching, grid)
