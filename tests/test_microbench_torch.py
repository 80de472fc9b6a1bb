"""The microbenchmark's torch code paths (run on the GPU by ``calibrate --measure --device cuda``),
exercised with torch on the CPU: attention against a plain softmax reference, and the all-reduce
harness over gloo. Skipped where torch is not installed."""

import numpy as np
import pytest

from costmodel.calibration.microbench import Kernel, _torch_attention_inputs, _torch_call

torch = pytest.importorskip("torch")


def _reference(Q, K, V, kv):
    """Softmax attention, query i of the chunk sees the kv cached keys and the chunk up to itself."""
    q = Q.shape[2]
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    allowed = np.arange(K.shape[2])[None, :] <= kv + np.arange(q)[:, None]
    s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ V


@pytest.mark.parametrize("shape", [(8, 2, 16, 5, 0, 1), (8, 2, 16, 5, 7, 1), (4, 4, 16, 1, 9, 3), (8, 1, 32, 1, 0, 2)])
def test_torch_attention_matches_the_reference(shape):
    torch.manual_seed(0)
    fn, (Q, K, V) = _torch_attention_inputs(
        torch, Kernel("attention_prefill", "a", shape, shape[3]), torch.float32, "cpu"
    )
    out = fn().numpy()
    ref = _reference(Q.numpy().astype(np.float64), K.numpy().astype(np.float64), V.numpy().astype(np.float64), shape[4])
    assert out.shape == ref.shape and np.allclose(out, ref, atol=1e-5)


def test_torch_gemm_and_copy_paths():
    g = _torch_call(torch, Kernel("gemm", "g", (3, 8, 5), 3), torch.float32, "cpu")()
    assert tuple(g.shape) == (3, 5)
    c = _torch_call(torch, Kernel("copy", "c", (16,), 0), torch.float32, "cpu")()
    assert tuple(c.shape) == (16,)


def test_allreduce_harness_over_gloo():
    from costmodel.calibration.allreduce_bench import measure_allreduce
    from costmodel.calibration.timings import validate

    df = validate(measure_allreduce(2, "cpu", sizes=(1 << 10, 1 << 16), warmup=1, repeats=3))
    assert list(df["workers"]) == [2, 2] and (df["time_s"] > 0).all()
    assert list(df["bytes"]) == [2 * 1 / 2 * (1 << 10), 2 * 1 / 2 * (1 << 16)]
