"""MMHA's key walk (costmodel/decode_launch.py, ``mmha_walk``) against its key loop enumerated
thread group by thread group, as decoderMaskedMultiheadAttentionTemplate.h runs it (16 threads per
key, 16-bit, d = 128; K_LOOP_UNROLL = 4)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.decode_launch import _walk, mmha_walk


def _loaded_rows(keys: int, threads: int) -> int:
    groups, unroll = threads // 16, 4  # K_PER_ITER key groups of 16 threads; rows per group per iteration
    end = -(-keys // 8) * 8  # k_loop_end: keys rounded up to UNROLLED_K_PER_WARP = 2 · 4
    rows = 0
    for start in range(0, end, groups * unroll):
        left = end - start  # an iteration within one warp's span: its keys' own rows
        rows += left if left <= 8 else sum(unroll for first in range(groups) if first < left)
    return rows


@pytest.mark.parametrize("threads", [256, 512, 1024])
def test_walk_counts_the_rows_the_key_loop_loads(threads):
    keys = np.arange(0, 1300)
    want = np.array([_loaded_rows(int(k), threads) for k in keys]) / 64.0
    assert mmha_walk(keys.astype(float), float(threads)).tolist() == want.tolist()
    assert [_walk(float(k), float(threads), 16.0) for k in keys] == want.tolist()


def test_walk_steps_where_the_loop_does():
    """256 threads: 2 to 8 keys cost their 8 rows, 9 to 64 keys 64, 65 to 72 keys 72, 73 to 80 128."""
    got = mmha_walk(np.array([2.0, 8.0, 9.0, 64.0, 65.0, 72.0, 80.0]), 256.0) * 64
    assert got.tolist() == [8, 8, 64, 64, 72, 72, 128]


def test_head_dim_64_steps_at_16_keys():
    """d = 64: 8 threads per key, UNROLLED_K_PER_WARP = 16, so 9 to 16 keys cost as 2 (one warp's
    span: 16 half-length rows) and the step comes past 16; the same bytes per iteration as d = 128
    (a row is half as long)."""
    from costmodel.decode_launch import key_threads

    assert key_threads(4.0 * 64 * 32 * 100.0, 32.0, 100.0) == 8.0 and key_threads(4.0 * 128 * 7 * 9.0, 7.0, 9.0) == 16.0
    got = mmha_walk(np.array([2.0, 16.0, 17.0, 128.0]), 256.0, 8.0)
    assert got.tolist() == [0.125, 0.125, 1.0, 1.0]
    assert mmha_walk(128.0, 256.0, 8.0) == mmha_walk(64.0, 256.0, 16.0)


def test_xqa_wave_latency_by_mma_tiles():
    """XQA's per-wave latency counts its query heads in 16-row MMA tiles: a grouped configuration
    of 4 or 16 query heads per KV head pays the same, 24 one tile more; the scalar and array
    paths agree to the bit."""
    from costmodel.decode_launch import launch_time, launch_times, xqa_rows

    assert xqa_rows(np.array([2.0, 4.0, 16.0, 24.0, 32.0])).tolist() == [0, 0, 0, 16, 16]
    v = [1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 0.02, 6e-6, 0.0, 7e-6, 4e-6, 0.0, 1e30, 1e-6, 1e30, 0.0, 0.0]
    n, kv, hkv = 64.0, 4096.0, 8.0
    t = {g: launch_time(v, n, kv, 1.0, 1.0, g * hkv, hkv, 108, (2, 32, "launch")) for g in (4.0, 16.0, 24.0)}
    assert t[4.0] == t[16.0] < t[24.0]
    arr = launch_times(
        v,
        np.array([n] * 3),
        np.array([kv] * 3),
        np.ones(3),
        np.ones(3),
        np.array([4.0, 16.0, 24.0]) * hkv,
        np.full(3, hkv),
        108,
        (2, 32, "launch"),
    )
    assert arr.tolist() == [t[4.0], t[16.0], t[24.0]]


def _v(**kw):
    names = (
        "pi",
        "beta",
        "beta_mha",
        "beta_l2",
        "l2",
        "cta",
        "cq",
        "unit",
        "over",
        "unit_mha",
        "over_mha",
        "comb",
        "pi_mha",
        "loop",
        "l2p",
        "hide",
        "comb0",
    )
    base = dict(
        pi=1e30,
        beta=1e12,
        beta_mha=1e12,
        beta_l2=1e13,
        l2=1e8,
        cta=1e30,
        cq=0.0,
        unit=0.0,
        over=0.0,
        unit_mha=0.0,
        over_mha=0.0,
        comb=0.0,
        pi_mha=1e30,
        loop=0.0,
        l2p=1e8,
        hide=0.0,
        comb0=0.0,
    )
    base.update(kw)
    return [base[k] for k in names]


def test_keys_that_fit_the_l2_are_read_from_it_whole():
    """A looping stream no larger than the L2 stays resident (the L40S's 96 MiB of keys ran at L2
    speed); beyond it the resident share falls as (C/B)^6. One MMHA sequence per head, one wave."""
    from costmodel.decode_launch import launch_time

    v = _v()
    at = launch_time(v, 1.0, 4096.0, 1.0, 1e8, 8.0, 8.0, 108, (2, 32, "launch"))
    assert at == pytest.approx(1e8 / 1e13, rel=1e-3)
    twice = launch_time(v, 1.0, 4096.0, 1.0, 2e8, 8.0, 8.0, 108, (2, 32, "launch"))
    r = 1.0 / 64.0
    assert twice == pytest.approx(2e8 * (1.0 - r) / 1e12 + 2e8 * r / 1e13, rel=1e-3)


def test_walk_of_many_blocks_is_bound_by_the_l2_serving_their_rows():
    """At many waves the walk's time is the rows all blocks issue over the L2's rate: halving the
    rate doubles it, while one block's latency per 64 rows (loop) is far smaller."""
    from costmodel.decode_launch import launch_time, launch_times

    t = [
        launch_time(_v(beta_l2=b, loop=1e-9), 256.0, 64.0, 1.0, 1.0, 32.0, 32.0, 108, (2, 32, "launch"))
        for b in (1e12, 2e12)
    ]
    assert t[0] == pytest.approx(2.0 * t[1]) and t[1] > 1e-6
    arr = launch_times(
        _v(beta_l2=1e12, loop=1e-9),
        np.array([256.0]),
        np.array([64.0]),
        np.ones(1),
        np.ones(1),
        np.array([32.0]),
        np.array([32.0]),
        108,
        (2, 32, "launch"),
    )
    assert arr.tolist() == [t[0]]
