"""Price a step table (calibration/step_timings.py) as the simulator does: each step's batch through
``CostModel`` (costmodel/roofline.py) on the profile the step fit writes, so that a fitted profile
prices the fitted steps exactly as the fit said, whatever the base profile's form (roofline, tile
GEMMs, fitted or unit-model attention, all-reduce regimes).

The step fit's scales act on the base profile's fields:

  s_π        pi_eff; with attention tied to it, attention's FLOP rates too (pi_attn, attn_decode_pi,
             attn_mixed_pi)
  s_π,attn   attention's FLOP rates when untied (pi_attn, or pi_eff where the base has none)
  s_β        every HBM rate: beta_eff, beta_attn, attn_prefill_beta (and its K/V part), attn_decode_beta_mha,
             elementwise_beta (the L2 and per-thread-block rates of the tile and unit models stay)
  s_rows     gemm_rows_pi_scale for GEMMs of more rows than gemm_rows_break, or for a step's rows
             past gemm_rows_budget

the per-layer terms (``layer``: kernel_launch_s, hop_latency_s) are added to the base's own:

  kernel_launch_s  elementwise_floor_s, the fixed cost of each per-layer elementwise kernel (two
                   norms, the activation, rotary: 2·L + dense + kv layers of them, so 4 per dense
                   layer, whatever the model); where the base prices no elementwise kernels
                   (elementwise_beta 0) their bytes are priced at its β_eff (scaled by s_β). The
                   carrier is this operator and not kernel_overhead_s because a tile-model
                   profile's GEMM floor is multiplied by its shape correction (gemm_tiles.py), so
                   kernel_overhead_s would add a shape-dependent, not a per-layer, time
  hop_latency_s    each all-reduce's latency grows by 2·(tp − 1)·hop_latency_s (NCCL's ring model:
                   2(tp − 1) hops): interconnect_latency_s + hop_latency_s, and every line's latency
                   of allreduce_regimes[tp] + 2·(tp − 1)·hop_latency_s, so the two all-reduces of
                   each layer cost 4·(tp − 1)·hop_latency_s more at every tp

and the host terms are the profile's (costmodel/host.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..allreduce import call_times, gather_rows
from ..gemm_tiles import grid
from ..hardware import Hardware
from ..host import HOST_FIELDS
from ..model import ModelSpec
from ..roofline import CostModel

ATTN_PI = ("attn_decode_pi", "attn_mixed_pi")
BETA = (
    "beta_eff",
    "beta_attn",
    "attn_prefill_beta",
    "attn_prefill_kv_beta",
    "attn_decode_beta_mha",
    "elementwise_beta",
)
LAUNCH_FIELD = "host_per_launch_s"  # host seconds per eager kernel launch (costmodel/host.py)
NO_HOST = dict.fromkeys((*HOST_FIELDS, LAUNCH_FIELD), 0.0)


def scaled_hardware(
    base: Hardware,
    s_pi: float,
    s_beta: float,
    s_pi_attn: float | None = None,
    rows_break: int = 0,
    s_rows: float = 1.0,
    host=None,
    budget: int = 0,
    layer=None,
) -> Hardware:
    """The base profile with the step fit's constants applied (module docstring); attention's π
    follows s_pi when s_pi_attn is None; ``host``: the HOST_FIELDS values, then optionally
    host_per_launch_s (default zeros); a rows
    regime is a break (``rows_break``) or a budget (``budget``), not both; ``layer``: (kernel_launch_s,
    hop_latency_s) or None (the base's per-layer costs unchanged, no elementwise kernels added)."""
    tied = s_pi_attn is None
    s_pa = s_pi if tied else s_pi_attn
    ch = {
        "pi_eff": base.pi_eff * s_pi,
        "pi_attn": (base.pi_attn * s_pi if base.pi_attn else None) if tied else base.pi_attention * s_pa,  # type: ignore[operator]
    }
    ch.update({f: getattr(base, f) * s_pa for f in ATTN_PI if getattr(base, f)})
    ch.update({f: getattr(base, f) * s_beta for f in BETA if getattr(base, f)})
    if rows_break:
        ch.update(gemm_rows_break=int(rows_break), gemm_rows_pi_scale=float(s_rows))
    elif budget:
        ch.update(gemm_rows_budget=budget, gemm_rows_pi_scale=float(s_rows))  # a float while a fit frees it
    ch.update(NO_HOST)
    ch.update(dict(zip((*HOST_FIELDS, LAUNCH_FIELD), (float(h) for h in host))) if host is not None else {})
    if layer is not None:
        ch.update(layer_fields(base, s_beta, *layer))
    return base.replace(**ch)


def layer_fields(base: Hardware, s_beta: float, launch: float, hop: float) -> dict:
    """The profile fields that carry the per-layer terms (module docstring) on top of ``base``."""
    launch, hop = float(launch), float(hop)
    out: dict = {"elementwise_floor_s": base.elementwise_floor_s + launch}
    if not base.elementwise_beta:
        out["elementwise_beta"] = base.beta_eff * s_beta
    if hop:
        out["interconnect_latency_s"] = base.interconnect_latency_s + hop
        out["allreduce_regimes"] = {
            tp: [float(v) + 2 * (int(tp) - 1) * hop if i % 2 == 0 else float(v) for i, v in enumerate(r)]
            for tp, r in (base.allreduce_regimes or {}).items()
        }
    return out


def scale_bounds(base: Hardware, tied: bool) -> tuple[float, float, float]:
    """Largest (s_pi, s_beta, s_pi_attn) that keep every scaled FLOP rate at most peak_flops and
    every HBM rate of a kernel (beta_eff, beta_attn, attn_decode_beta_mha) at most peak_bandwidth."""
    attn = max([base.pi_attention] + [getattr(base, f) for f in ATTN_PI])
    pi = base.peak_flops / (max(base.pi_eff, attn) if tied else base.pi_eff)
    beta = base.peak_bandwidth / max(base.beta_eff, base.beta_attention, base.attn_decode_beta_mha)
    return pi, beta, base.peak_flops / attn


@dataclass(frozen=True)
class StepShapes:
    """A step table's distinct batches, as ``CostModel.shape`` takes them, and its host columns."""

    batches: list  # (prefill q_lens, their kv_lens, decodes, Σ(kv + 1) of the decodes)
    inv: np.ndarray  # step -> its batch
    host_cols: np.ndarray  # (steps, 4): 1, seqs, prefill_seqs, [prefill_seqs > 0]
    rows: np.ndarray  # (steps,) Σ q
    cache: dict = field(default_factory=dict, compare=False)  # the tile model's grids (``_tiled_lookup``)
    flat: dict = field(default_factory=dict, compare=False)  # the batches' sequences flattened (``_sequences``)

    def __len__(self) -> int:
        return len(self.inv)


def step_shapes(steps: pd.DataFrame) -> StepShapes:
    groups = steps["prefill_groups"].tolist()
    seqs, pseqs = steps["seqs"].to_numpy(np.int64), steps["prefill_seqs"].to_numpy(np.int64)
    dkv = steps["decode_kv"].to_numpy(np.int64)
    index, batches, inv = {}, [], np.empty(len(steps), np.int64)  # type: ignore[var-annotated]
    for i, (g, d, t) in enumerate(zip(groups, seqs - pseqs, dkv)):
        key = (g, int(d), int(t))
        j = index.get(key)
        if j is None:
            j = index[key] = len(batches)
            q = [int(x) for n, x, _ in g for _ in range(n)]
            kv = [int(x) for n, _, x in g for _ in range(n)]
            batches.append((q, kv, int(d), int(t)))
        inv[i] = j
    p = pseqs.astype(float)
    host = np.stack([np.ones(len(steps)), seqs.astype(float), p, (p > 0).astype(float)], 1)
    return StepShapes(batches, inv, host, steps["rows"].to_numpy(np.int64))


def subset(shapes: StepShapes, idx) -> StepShapes:
    """The steps ``idx`` (a slice or index array) of a StepShapes."""
    if isinstance(idx, slice) and idx == slice(None):
        return shapes
    return StepShapes(
        shapes.batches, shapes.inv[idx], shapes.host_cols[idx], shapes.rows[idx], shapes.cache, shapes.flat
    )


def gpu_times(shapes: StepShapes, model: ModelSpec, hw: Hardware, tp: int) -> np.ndarray:
    """Seconds of GPU time per step: ``CostModel.step_time`` of each distinct batch, host terms off."""
    used = np.unique(shapes.inv)
    t = np.zeros(len(shapes.batches))
    t[used] = batch_times(shapes, model, hw, tp, used)
    return t[shapes.inv]


def batch_times(
    shapes: StepShapes, model: ModelSpec, hw: Hardware, tp: int, idx: np.ndarray, used: np.ndarray | None = None
) -> np.ndarray:
    """GPU seconds of the distinct batches ``idx`` as ``CostModel.step_time`` prices them, host terms
    off: a tile-model profile's GEMMs for every distinct row count of ``used`` (default ``idx``) at once
    (``_tiled_lookup``), the attention sums of every batch at once and the rest per distinct
    (rows, sequences) or attention sums (``_vector_times``)."""
    cm = CostModel(model, hw.replace(**NO_HOST), tp)
    if cm.tiles is not None:
        _tiled_lookup(cm, shapes, np.unique(idx) if used is None else used)
    if cm.q_tile:
        return _wave_times(cm, shapes, idx)
    return _vector_times(cm, shapes, np.asarray(idx, dtype=np.int64))


def _wave_times(cm: CostModel, shapes: StepShapes, idx) -> np.ndarray:
    """``step_time`` under the attention wave model, ``time(shape(batch))``: each batch's ShapeStats
    built once per table (fitted attention splits prefill from decode at 1 whatever the scales),
    ``_fixed_part`` by ``_fixed_by_key``, attention batch by batch; checked on a sample as above."""
    memo = shapes.flat.setdefault(("shape", cm.attn_bound, cm.q_tile), {})
    b, ss = shapes.batches, []
    for j in idx:
        s = memo.get(j)
        if s is None:
            s = memo[j] = cm.shape(*b[j])
        ss.append(s)
    rows, seqs = np.array([s.rows for s in ss], dtype=np.int64), np.array([s.seqs for s in ss], dtype=np.int64)
    attn = np.array(
        [
            cm._attention_time(
                s.prefill_pairs,
                s.prefill_kv,
                s.memory_bound_pairs,
                s.decode_kv,
                s.seqs - s.prefill_seqs,
                s.rows,
                cm._prefill_compute(s),
            )
            for s in ss
        ]
    )
    t = _fixed_by_key(cm, rows, seqs) + attn
    if not _agrees_on_sample(t, lambda i: cm.step_time(*b[idx[i]])):
        return np.array([cm.step_time(*b[j]) for j in idx])
    return t


def _agrees_on_sample(fast: np.ndarray, exact) -> bool:
    """A vector path's times against the scalar path's (``exact(i)``) at the first, middle and last
    entries, to 1e-12: where they disagree the caller prices everything the scalar way."""
    return all(math.isclose(fast[i], exact(i), rel_tol=1e-12) for i in {0, len(fast) // 2, len(fast) - 1})


def _fixed_by_key(cm: CostModel, rows: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """``_fixed_times`` once per distinct key of ``_fixed_part`` (rows, or rows and sequences)."""
    _, first, inv = np.unique(
        rows * (int(seqs.max()) + 1) + seqs if cm._fixed_uses_seqs else rows, return_index=True, return_inverse=True
    )
    return _fixed_times(cm, rows[first], seqs[first])[inv]


def _sequences(shapes: StepShapes) -> dict:
    """The prefill sequences of every batch in one array each (batch, q, kv, pairs, KV tokens) and
    per batch its sequence count, decodes and their Σ(kv + 1); built once per table."""
    f = shapes.flat
    if "batch" not in f:
        b = shapes.batches
        n = np.array([len(x[0]) for x in b], dtype=np.int64)
        q = np.fromiter((v for x in b for v in x[0]), np.int64, int(n.sum()))
        kv = np.fromiter((v for x in b for v in x[1]), np.int64, int(n.sum()))
        f.update(
            batch=np.repeat(np.arange(len(b)), n),
            q=q,
            pairs=q * kv + q * (q + 1) // 2,
            tokens=kv + q,
            n=n,
            decodes=np.array([x[2] for x in b], dtype=np.int64),
            dtok=np.array([x[3] for x in b], dtype=np.int64),
        )
        f["exact"] = float(f["pairs"].sum() + f["tokens"].sum() + f["dtok"].sum() + f["q"].sum()) < 2.0**52
    return f


def _vector_times(cm: CostModel, shapes: StepShapes, idx: np.ndarray) -> np.ndarray:
    """``step_time``'s operations for the batches ``idx``: ``attention_sums`` as integer-valued float
    sums (exact below 2**52), ``_fixed_part`` once per distinct (rows, sequences), roofline attention
    elementwise (``_attention_time``'s operations) or fitted attention once per distinct sums. Used
    only where a sample of batches matches ``step_time`` to 1e-12 (else every batch by ``step_time``)."""
    f, b = _sequences(shapes), shapes.batches
    step = lambda js: np.array([cm.step_time(*b[j]) for j in js], dtype=float)
    wide = f["n"][idx] > 48  # step_time's ShapeStats path
    if not f["exact"] or wide.all():
        return step(idx)
    t = np.empty(len(idx))
    if wide.any():
        t[wide] = step(idx[wide])
    js = idx[~wide]
    take = np.zeros(len(b), bool)
    take[js] = True
    sel = take[f["batch"]]
    bt, p, tok, q = f["batch"][sel], f["pairs"][sel], f["tokens"][sel], f["q"][sel]
    hot = p > cm.attn_bound * tok
    nb = len(b)
    s = lambda w: np.bincount(bt, weights=w, minlength=nb)[js]
    d, dt = f["decodes"][js], f["dtok"][js].astype(float)
    dec_hot = (d > 0) & (1 > cm.attn_bound)
    dec_cold = (d > 0) & ~(1 > cm.attn_bound)
    pairs = s(np.where(hot, p, 0).astype(float)) + np.where(dec_hot, dt, 0.0)
    pkv = s(np.where(hot, tok, 0).astype(float)) + np.where(dec_hot, dt, 0.0)
    dpairs = s(np.where(hot, 0, p).astype(float)) + np.where(dec_cold, dt, 0.0)
    dkv = s(np.where(hot, 0, tok).astype(float)) + np.where(dec_cold, dt, 0.0)
    rows = (s(q.astype(float)) + d).astype(np.int64)
    pseqs = s((q > 1).astype(float)).astype(np.int64)
    seqs = f["n"][js] + d
    fixed = _fixed_by_key(cm, rows, seqs)
    if not cm.attn_fitted:
        attn = _roofline_attention(cm, pairs, pkv, dpairs, dkv)
    else:
        sums = np.stack([pairs, pkv, dpairs, dkv, seqs - pseqs, rows], 1)
        u, ui = np.unique(sums, axis=0, return_inverse=True)
        attn = np.array([cm._attention_time(a, k, dp, dk, int(n), int(r)) for a, k, dp, dk, n, r in u.tolist()])[
            ui.ravel()
        ]
    t[~wide] = tv = fixed + attn
    if not _agrees_on_sample(tv, lambda i: cm.step_time(*b[js[i]])):
        return step(idx)
    return t


def _fixed_times(cm: CostModel, rows: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """``CostModel._fixed_part`` of each (rows, seqs): roofline weight operators elementwise
    (``_fixed_time``, ``_weight_terms``, ``_pi_rows`` and ``allreduce_s``: the same float operations
    in their order; a tile-model profile's GEMMs from ``_tiled_lookup``'s tables) where the profile has
    no MoE or linear attention and the operators are those named, checked against ``_fixed_time`` on a
    sample; else one by one."""
    one = lambda: np.array([cm._fixed_part(int(r), int(n)) for r, n in zip(rows, seqs)])
    hw, m, b = cm.hw, cm.model, cm.model.b
    tiled = getattr(cm, "step_fit_tables", None) if cm.tiles is not None else {}
    if tiled is None or m.is_moe or cm.lin_attn_flops_per_row or not len(rows):
        return one()
    if tiled:
        tiled = {k: _looked_up(*tiled[k], rows if k == "linear" or cm.counting == "seed" else seqs) for k in tiled}  # type: ignore[call-arg]
        if any(v is None for v in tiled.values()):
            return one()
    seed = cm.counting == "seed"
    names = ["linear", "embedding"] + (["lm_head"] if cm.head_gemm_params or not seed else [])
    names += (["elementwise"] if hw.elementwise_beta else []) + (
        ["sampler"] if hw.sampler_s or hw.sampler_seq_s else []
    )
    if [t[0] for t in cm._weight_terms(int(rows[0]), int(seqs[0]))] != names:
        return one()
    r, n = rows.astype(float), seqs.astype(float)
    pi = _pi_rows(cm, hw.pi_eff, rows)
    beta, floor, over = hw.beta_eff, hw.kernel_floor_s, hw.kernel_overhead_s
    terms = [
        tiled.get("linear")
        if tiled
        else (2 * cm.lin_params * r, b * cm.lin_params, pi, beta, cm.floor_layers, cm.over_linear)
    ]
    if seed:
        terms.append((2 * cm.embed_gemm_params * r, b * cm.embed_gemm_params, pi, beta, floor, over))
        if cm.head_gemm_params:
            terms.append(
                tiled.get("lm_head")
                if tiled
                else (2 * cm.head_gemm_params * r, b * cm.head_gemm_params, pi, beta, floor, over)
            )
    else:
        terms.append((0.0, b * m.H * r, pi, beta, floor, over))
        terms.append(
            tiled.get("lm_head")
            if tiled
            else (2 * cm.vocab_params * n, b * cm.vocab_params, _pi_rows(cm, hw.pi_eff, seqs), beta, floor, over)
        )
    if hw.elementwise_beta:
        terms.append((0.0, cm.elem_bytes_per_row * r, pi, hw.elementwise_beta, 0.0, cm.elem_over))
    if hw.sampler_s or hw.sampler_seq_s:
        terms.append((0.0, 0.0, pi, beta, 0.0, hw.sampler_s + hw.sampler_seq_s * n))
    t = np.full(len(rows), float(hw.step_overhead_s))
    for term in terms:
        if isinstance(term, np.ndarray):  # a tile-model GEMM's time
            t = t + term
            continue
        fl, by, p, be, fo, ov = term  # type: ignore[misc]
        a, mm = fl / p, by / be
        t = t + (
            (np.maximum(np.sqrt(a * a + mm * mm), fo) if cm.quadrature else np.maximum(np.maximum(a, mm), fo)) + ov
        )
    t = t + _allreduce(cm, rows) + _gather(cm, seqs)
    if not _agrees_on_sample(t, lambda i: cm._fixed_time(int(rows[i]), int(seqs[i]))):
        return one()
    return t


def _looked_up(keys: np.ndarray, times: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """times[keys == x] for each x (keys sorted); None if some x is not among the keys."""
    i = np.minimum(np.searchsorted(keys, x), len(keys) - 1)
    return times[i] if (keys[i] == x).all() else None


def _pi_rows(cm: CostModel, pi: float, rows: np.ndarray) -> np.ndarray:
    """``CostModel._pi_rows`` elementwise."""
    p = np.where(rows > cm.rows_break, pi * cm.rows_pi_scale, pi) if cm.rows_break else np.full(len(rows), pi)
    if cm.rows_budget:
        p = np.where(rows > cm.rows_budget, pi / _budget_factor(cm, rows), p)
    t = cm.tile
    if t <= 1:
        return p
    return np.where((rows <= 0) | (rows % t == 0), p, p * rows / (-(-rows // t) * t))


def _budget_factor(cm: CostModel, rows: np.ndarray) -> np.ndarray:
    """``CostModel.budget_factor`` elementwise (the same float operations)."""
    b = cm.rows_budget
    if not b:
        return np.ones(len(rows))
    r = np.maximum(rows, 1).astype(float)
    return np.where(rows > b, (b + (r - b) / cm.rows_pi_scale) / r, 1.0)


def _allreduce(cm: CostModel, rows: np.ndarray):
    """``CostModel.allreduce_s`` elementwise."""
    if cm.tp == 1:
        return 0.0
    if cm.pcie is not None:  # NCCL's tuning model (costmodel/pcie.py), one price per distinct size
        u, inv = np.unique(np.asarray(rows, float), return_inverse=True)
        t = np.array([cm.allreduce_s(int(r)) for r in u])
        return t[inv].reshape(np.shape(rows))
    if not cm.ar_regimes:
        return cm.ar_bytes_per_row * rows / cm.hw.interconnect_bandwidth + cm.ar_latency
    return cm.ar_calls * call_times(
        cm.ar_regimes,
        cm.ar_bytes_per_call_row * rows,
        rows,
        cm.ar_oneshot_tokens,
        cm.ar_oneshot_alone,
        cm.ar_switches,
        cm.ar_wave,
        cm.ar_sms,
        cm.ar_hinge,
        cm.ar_soft,
    )


def _gather(cm: CostModel, seqs: np.ndarray):
    """``CostModel.gather_s`` elementwise."""
    if not cm.gather_bytes_per_seq:
        return 0.0
    if cm.pcie is not None:
        u, inv = np.unique(np.asarray(seqs, float), return_inverse=True)
        t = np.array([cm.gather_s(int(x)) for x in u])
        return t[inv].reshape(np.shape(seqs))
    size, r = cm.gather_bytes_per_seq * seqs, cm.ar_regimes
    if not r:
        return size / cm.hw.interconnect_bandwidth + (cm.tp - 1) * cm.hw.interconnect_latency_s
    rows = gather_rows(size, cm.ar_bytes_per_call_row, cm.ar_oneshot_tokens, cm.ar_switches)
    return call_times(
        r, size, np.broadcast_to(rows, np.shape(size)), cm.ar_oneshot_tokens, False, cm.ar_switches, soft=cm.ar_soft
    )


def _roofline_attention(cm: CostModel, pairs, pkv, dpairs, dkv) -> np.ndarray:
    """``CostModel._attention_time`` of roofline attention, elementwise (the same float operations)."""
    pi, beta, floor, over = cm.hw.pi_attention, cm.hw.beta_attention, cm.floor_attn, cm.over_layers

    def op(coef, fl, by):
        a, m = (coef * fl) / pi, (cm.kv_coef * by) / beta
        return (
            np.maximum(np.sqrt(a * a + m * m), floor) if cm.quadrature else np.maximum(np.maximum(a, m), floor)
        ) + over

    return np.where(pkv != 0, op(cm.attn_coef, pairs, pkv), 0.0) + np.where(dkv != 0, op(cm.dec_coef, dpairs, dkv), 0.0)


def _tiled_lookup(cm: CostModel, shapes: StepShapes, used: np.ndarray) -> None:
    """Give ``cm`` its tile-model GEMM times (``CostModel._tiled_time``) for every distinct row count
    of the batches ``used`` from one vectorized evaluation of the tile model on grids built once per
    table (``gemm_tiles.grid``: only the constants change between a fit's evaluations). Installed
    only when a sample of row counts matches ``_tiled_time`` itself to 1e-12, checked once per grid,
    shape correction and rows break (the constants enter both alike)."""
    key = (
        cm.model.name,
        cm.tp,
        cm.hw.sms,
        cm.counting,
        hash(used.tobytes()),
        repr((cm.hw.gemm_corr_knots, cm.hw.gemm_corr)),
        cm.tiles.field_key,  # type: ignore[union-attr]
    )
    g = shapes.cache.get(key)
    bt, m = cm.model.b, cm.model
    if g is None:
        rows = np.unique([sum(shapes.batches[j][0]) + shapes.batches[j][2] for j in used])
        seqs = np.unique([len(shapes.batches[j][0]) + shapes.batches[j][2] for j in used])
        heads = rows if cm.counting == "seed" else seqs
        K = len(cm.tile_k)
        lin_m, lin_n, lin_k = np.repeat(rows, K), np.tile(cm.tile_n, len(rows)), np.tile(cm.tile_k, len(rows))
        f_lin = np.reshape(cm.tiles.factor(lin_m, lin_n, lin_k), (-1, K)) if cm.tiles.corrected else 1.0  # type: ignore[union-attr]
        f_head = np.reshape(cm.tiles.factor(heads, cm.vocab_params / m.H, m.H), (-1, 1)) if cm.tiles.corr else 1.0  # type: ignore[union-attr]
        g = shapes.cache[key] = (
            rows,
            grid(lin_m, lin_n, lin_k, cm.hw.sms, bt),
            heads,
            grid(heads, cm.vocab_params / m.H, m.H, cm.hw.sms, bt),
            f_lin,
            f_head,
            set(),
        )
        if len(shapes.cache) > 8:
            shapes.cache.pop(next(iter(shapes.cache)))
    rows, g_lin, heads, g_head, f_lin, f_head, checked = g

    def table(x, gr, width, weights, name):
        f = f_lin if name == "linear" else f_head  # the profile's GEMM shape correction (gemm_correction.py)
        t = cm.tiles.on_grid(gr).reshape(len(x), width) * f
        if cm.rows_break and (x > cm.rows_break).any():
            above = cm.tiles_above.on_grid(gr).reshape(len(x), width) * f
            t = np.where((x > cm.rows_break)[:, None], above, t)
        t = ((t * weights).sum(1) if weights is not None else t[:, 0]) * _budget_factor(cm, x)
        if name == "linear" and cm.lin_rest:
            pi = (
                np.where(x > cm.rows_break, cm.hw.pi_eff * cm.rows_pi_scale, cm.hw.pi_eff)
                if cm.rows_break
                else cm.hw.pi_eff
            )
            pi = pi / _budget_factor(cm, x) if cm.rows_budget else pi
            t = t + np.hypot(2 * cm.lin_rest * x / pi, bt * cm.lin_rest / cm.hw.beta_eff)
        return x, t

    tables = {
        "linear": table(rows, g_lin, len(cm.tile_k), cm.tile_count, "linear"),
        "lm_head": table(heads, g_head, 1, None, "lm_head"),
    }
    lin, head = (dict(zip(x.tolist(), t.tolist())) for x, t in tables.values())
    seed = cm.counting == "seed"

    def fast(name, r, s):
        try:
            return head[r if seed else s] if name == "lm_head" else lin[r]
        except KeyError:
            return CostModel._tiled_time(cm, name, r, s)

    if (cm.rows_break, cm.rows_budget, cm.rows_pi_scale == 1.0) not in checked:
        for r in {int(rows[0]), int(rows[len(rows) // 2]), int(rows[-1])}:
            s = int(heads[0]) if not seed else r
            for name in ("linear", "lm_head"):
                ref = CostModel._tiled_time(cm, name, r, s)
                if not math.isclose(fast(name, r, s), ref, rel_tol=1e-12):
                    return
        checked.add((cm.rows_break, cm.rows_budget, cm.rows_pi_scale == 1.0))  # type: ignore[arg-type]
    cm._tiled_time = fast  # type: ignore[method-assign]
    cm.step_fit_tables = tables  # type: ignore[attr-defined]  # the same times by row count, for ``_fixed_times``


def with_host(gpu: np.ndarray, shapes: StepShapes, host, overlap: bool, launch: float = 0.0) -> np.ndarray:
    """Wall seconds per step: GPU plus host (serial) or the larger of the two (overlap), the pass's
    eager launches (``launch`` seconds) hidden under the GPU's time as costmodel/host.py prices them."""
    h = shapes.host_cols @ np.asarray(host, dtype=float)
    if overlap:
        return np.maximum(gpu, h + launch)
    return (np.maximum(gpu, launch) if launch else gpu) + h


def price_steps(steps: pd.DataFrame, model: ModelSpec, hw: Hardware, tp: int, overlap: bool = False) -> np.ndarray:
    """Seconds per step as the simulator prices each batch with ``hw``, host time included."""
    price = CostModel(model, hw, tp, overlap_host=overlap).step_time
    sh = step_shapes(steps)
    t = np.array([price(*b) for b in sh.batches])
    return t[sh.inv]
