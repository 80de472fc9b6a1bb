"""A fit becomes a hardware profile, and a profile gives its fitted parameters back.

The roofline reads pi_eff, beta_eff and the GEMM floor (kernel_floor_s for the max form,
kernel_overhead_s for offset/smooth; smooth also sets gemm_tile_rows and roofline_combine) from the GEMM class, pi_attn/beta_attn from the
attention classes and the interconnect fields from all-reduce timings; every other class (norms,
activations, copies) is kept in ``calibration`` with the covariance of the log-parameters, so a
profile alone is enough to sample plausible hardware (``predict.sample_hardware``). The norm
class's wave/L2 model records its GPU constants (SMs, threads per SM, L2 bytes) there too, under
``row_kernel_model``, since the Hardware fields have none of them.
"""

from __future__ import annotations

import datetime as dt
import os

import numpy as np

from ..decode_units import FIELDS as DECODE_FIELDS
from ..hardware import Hardware
from ..moe_cost import FIELDS as MOE_FIELDS
from ..shape import Q_TILE
from .allreduce_model import count_slices, hinged, line_values, oneshot_alone
from .fit import MMA_ROWS, ROW_CLASSES, TILE_ROWS, Fit

HW_FIELDS = {
    "gemm.pi": "pi_eff",
    "gemm.beta": "beta_eff",
    "gemm.floor": "kernel_floor_s",
    "attention_prefill.pi": "pi_attn",
    "attention_decode.beta": "beta_attn",
    "allreduce.bandwidth": "interconnect_bandwidth",
    "allreduce.latency": "interconnect_latency_s",
    "gemm.beta_l2": "gemm_l2_beta",
    "gemm.beta_cta": "gemm_cta_beta",
    "gemm.split": "gemm_split_s",
    "gemm.wave": "gemm_wave_s",
    "gemm.l2": "gemm_l2_resident_bytes",
    "gemm.l2_out": "gemm_l2_out_bytes",
    "gemm.l2_act": "gemm_l2_act_bytes",
}


ATTENTION_FIELDS = {
    "attention.pi_prefill": "pi_attn",
    "attention.beta_prefill": "attn_prefill_beta",
    "attention.overhead_prefill": "attn_prefill_overhead_s",
    "attention.pi_decode": "attn_decode_pi",
    "attention.beta_decode": "beta_attn",
    "attention.seq": "attn_decode_seq_s",
    "attention.overhead_decode": "attn_decode_overhead_s",
    "attention.pi_mixed": "attn_mixed_pi",
    "attention.seq_mixed": "attn_mixed_seq_s",
    "sampler.floor": "sampler_s",
    "attention.wave": "attn_wave_s",
    "attention.wave_q": "attn_wave_s",
    "elementwise.beta": "elementwise_beta",
    "elementwise.floor": "elementwise_floor_s",
    "sampler.per_seq": "sampler_seq_s",
    "attention.beta_prefill_l2": "attn_prefill_l2_beta",
    "attention.l2_prefill": "attn_prefill_l2_bytes",
    "attention.beta_prefill_kv": "attn_prefill_kv_beta",
    "attention.beta_prefill_kv_l2": "attn_prefill_kv_l2_beta",
    "attention.l2_prefill_kv": "attn_prefill_kv_l2_bytes",
    "attention.tail_key": "attn_tail_key_s",
    "attention.softmax_prefill": "attn_softmax_rate",
    "attention.exposed_prefill": "attn_prefill_dram_exposed",
    "attention.row_prefill": "attn_prefill_row_s",
}


ATTENTION_FIELDS.update({f"attention.{p}": fld for p, fld in DECODE_FIELDS.items()})


def hw_fields(form: str) -> dict:
    """Fitted parameter -> Hardware field, for profiles fitted with ``form``."""
    floor = "kernel_floor_s" if form == "max" else "kernel_overhead_s"
    return {**HW_FIELDS, "gemm.floor": floor, **ATTENTION_FIELDS}


def form_fields(form: str) -> dict:
    """The Hardware fields that make the roofline price kernels the way ``form`` fitted them."""
    if form in ("smooth", "physical"):
        return {"gemm_tile_rows": TILE_ROWS if form == "smooth" else MMA_ROWS, "roofline_combine": "quadrature"}
    return {"gemm_tile_rows": 1, "roofline_combine": "max"}


def calibration_dict(fit: Fit, source: str, errors=None, warnings=(), unused=()) -> dict:
    """Plain YAML-safe record of the fit: parameters with 1σ, errors per class, warnings.
    `unused`: parameters the profile does not take (their kind priced as the base prices it),
    recorded but left out of the covariance, so that draws (``predict.sample_hardware``) leave
    those fields alone."""
    names, blocks = [], []
    params = {}
    for c in fit.classes.values():
        take = []
        for j, p in enumerate(c.params):
            name = f"{c.op_class}.{p}"
            rs = float(c.rel_sigma[j])
            params[name] = {
                "value": float(c.values[j]),
                "sigma": float(c.values[j] * rs) if np.isfinite(rs) else None,
                "rel_sigma": rs if np.isfinite(rs) else None,
                "active_points": c.active[p],
            }
            if name in unused:
                params[name]["unused"] = True
            else:
                names.append(name)
                take.append(j)
        blocks.append(c.log_cov[np.ix_(take, take)])
    cov = np.zeros((len(names), len(names)))
    i = 0
    for b in blocks:
        k = b.shape[0]
        cov[i : i + k, i : i + k] = np.where(np.isfinite(b), b, 0.0)
        i += k
    err = errors if errors is not None else {c.op_class: c.errors for c in fit.classes.values()}
    form = next(iter(fit.classes.values())).form if fit.classes else "offset"
    rows = [c for c in fit.classes.values() if c.op_class in ROW_CLASSES]
    extra = (
        {
            "row_kernel_model": {
                "classes": [c.op_class for c in rows],
                "formula": "t = floor*(1 + w) + B_w/beta_l2 if B <= l2_bytes else B_w/beta; w = ceil(rows/R), "
                "R = sms*min(max_blocks_per_sm, threads_per_sm // min(width, max_block_threads)), B_w = B*w*R/rows",
                "device": rows[0].device.as_dict(),
            }
        }
        if rows
        else {}
    )
    return {
        "source": source,
        "date": dt.date.today().isoformat(),
        "form": form,
        **extra,
        "method": "scipy.optimize.least_squares, residuals ln(t_model/t_measured), soft_l1 loss, "
        "1σ = sqrt(diag(inv(JᵀJ)·s²)) of ln(parameter)",
        "parameters": params,
        "errors_percent": err,
        "residual_scale_log": {c.op_class: c.s for c in fit.classes.values()},
        "log_covariance": {"names": names, "matrix": cov.tolist()},
        "warnings": fit.warnings + list(warnings),
        "fit_seconds": fit.seconds,
    }


def profile_from_fit(fit: Fit, base: Hardware, source: str, name: str | None = None) -> Hardware:
    """``base`` with the fitted fields replaced; counting 'faithful' (the fit prices real kernels)."""
    form = next(iter(fit.classes.values())).form
    fields = hw_fields(form)
    changes = {
        fld: fit.value(p)
        for p, fld in fields.items()
        if p.rsplit(".", 1)[0] in fit.classes and p.rsplit(".", 1)[1] in fit.classes[p.rsplit(".", 1)[0]].params
    }
    warnings, unused, kept = [], (), {}  # type: ignore[var-annotated]
    if "attention" in fit.classes:
        changes["attn_form"] = "varlen" if "pi_mixed" in fit.classes["attention"].params else "separate"  # type: ignore[assignment]
        changes["attn_wave_form"] = "quantized" if "wave_q" in fit.classes["attention"].params else "max"  # type: ignore[assignment]
        if getattr(fit.classes["attention"], "q_tile", Q_TILE) != Q_TILE:
            changes["attn_q_tile"] = int(fit.classes["attention"].q_tile)  # type: ignore[attr-defined]
        if "unit" in fit.classes["attention"].params:
            groups = fit.classes["attention"].groups  # type: ignore[attr-defined]
            changes["attn_decode_group_min"], changes["attn_decode_group_max"] = map(int, groups[:2])
            changes["attn_decode_split"] = groups[2] if len(groups) > 2 else "flow"  # type: ignore[assignment]
            changes["attn_decode_mmha_blocks"] = int(groups[3]) if len(groups) > 3 else 4
            if changes["attn_decode_split"] not in ("launch", "gen"):  # MMHA's launch terms (decode_launch.py)
                changes.update(
                    attn_decode_pi_mha=0.0,
                    attn_decode_loop_mha_s=0.0,
                    attn_decode_l2_pass_bytes=0.0,
                    attn_decode_hidden_keys=0.0,
                    attn_decode_combine_fixed_s=0.0,
                    attn_decode_issue_beta=0.0,
                )
        kept, warnings, unused = one_sided_attention(fit.classes["attention"], base, fields)  # type: ignore[assignment]
        changes.update(kept)
    g = fit.classes.get("gemm")
    if g is not None and "beta_cta" in g.params:
        v = dict(zip(g.params, (float(x) for x in g.values)))
        changes.update(
            gemm_form="tiles",
            pi_eff=v["pi"],
            beta_eff=v["beta"],
            kernel_overhead_s=v["floor"],  # type: ignore[call-overload]
            gemm_l2_beta=v["beta_l2"],
            gemm_cta_beta=v["beta_cta"],
            gemm_split_s=v["split"],
            gemm_wave_s=v["wave"],
            gemm_l2_resident_bytes=v["l2"],
            gemm_l2_out_bytes=v["l2_out"],
            gemm_l2_act_bytes=v.get("l2_act", 0.0),
            sms=g.sms,  # type: ignore[attr-defined]
            gemm_corr_knots=[list(kn) for kn in g.corr_knots],  # type: ignore[attr-defined]
            gemm_corr=list(g.corr),  # type: ignore[attr-defined]
        )
        fld = getattr(g, "field", ()) or ([], [], [], [], 0.0)  # type: ignore[var-annotated]
        changes.update(
            gemm_field_m=list(fld[0]),
            gemm_field_shapes=[list(s) for s in fld[1]],  # type: ignore[call-overload]
            gemm_field=[list(r) for r in fld[2]],
            gemm_field_h=[float(v) for v in np.atleast_1d(fld[3])],
            gemm_field_shrink=float(fld[4]),
        )
        changes["gemm_serial"] = [float(v) for v in getattr(g, "serial", ())]  # type: ignore[assignment]
    ar = fit.classes.get("allreduce")
    if ar is not None and any("@" in p for p in ar.params):
        split = {n: line_values(ar.params, ar.values, sl) for n, sl in count_slices(ar.params)}
        changes["allreduce_regimes"] = {n: [float(v) for v in lines] for n, (lines, _) in split.items()}  # type: ignore[assignment]
        changes["allreduce_wave_s"] = {n: wave for n, (_, wave) in split.items() if wave > 0}  # type: ignore[assignment]
        changes["allreduce_oneshot_tokens"] = int(getattr(ar, "oneshot_tokens", 0))
        changes["allreduce_oneshot_alone"] = [n for n, sl in count_slices(ar.params) if oneshot_alone(ar.params, sl)]  # type: ignore[assignment]
        changes["allreduce_oneshot_max"] = [n for n, sl in count_slices(ar.params) if hinged(ar.params, sl)]  # type: ignore[assignment]
        changes["allreduce_soft"] = [int(n) for n in getattr(ar, "soft", ())]  # type: ignore[assignment]
        if getattr(ar, "switches", None):
            changes["allreduce_switches"] = {n: [float(g) for g in gaps] for n, gaps in ar.switches.items()}  # type: ignore[assignment, attr-defined]
        big = max(changes["allreduce_regimes"])  # type: ignore[call-overload]
        changes["interconnect_bandwidth"] = changes["allreduce_regimes"][big][-1]  # type: ignore[index]
        changes["interconnect_latency_s"] = changes["allreduce_regimes"][big][0] / (2 * (big - 1))  # type: ignore[index]  # small messages' line
    moe = fit.classes.get("moe")
    if moe is not None and "pi_moe" in moe.params:
        v = dict(zip(moe.params, (float(x) for x in moe.values)))
        changes.update({fld: v[f"{p}_moe"] for p, fld in MOE_FIELDS.items()})
        changes.update(
            moe_tuned_pi=v.get("pi_tuned_moe", 0.0),  # type: ignore[call-overload]
            moe_tuned_shapes=[[int(e), int(n)] for e, n in getattr(moe, "tuned", ())],
        )
    other = "kernel_overhead_s" if form == "max" else "kernel_floor_s"
    changes = {other: 0.0, **changes} if "gemm" in fit.classes else changes
    return base.replace(
        name=name or f"{base.name}-calibrated",
        counting="faithful",
        **changes,
        **form_fields(form),
        description=f"{base.description or base.name}, calibrated from {source}",
        notes=f"{', '.join(sorted(set(changes) - set(kept)))} fitted by chunksim calibrate (form "
        f"{next(iter(fit.classes.values())).form}); the other fields are {base.name}'s.",
        calibration=calibration_dict(fit, source, warnings=warnings, unused=unused),
    )


PREFILL_SIDE = (
    "pi_attn",
    "attn_prefill_beta",
    "attn_prefill_overhead_s",
    "attn_wave_s",
    "attn_wave_form",
    "attn_q_tile",
    "attn_prefill_l2_beta",
    "attn_prefill_l2_bytes",
    "attn_prefill_kv_beta",
    "attn_prefill_kv_l2_beta",
    "attn_prefill_kv_l2_bytes",
    "attn_tail_key_s",
    "attn_softmax_rate",
    "attn_prefill_dram_exposed",
    "attn_prefill_row_s",
)
DECODE_SIDE = tuple(DECODE_FIELDS.values()) + (
    "attn_decode_seq_s",
    "attn_decode_group_min",
    "attn_decode_group_max",
    "attn_decode_split",
    "attn_decode_mmha_blocks",
)


def one_sided_attention(att, base: Hardware, fields: dict) -> tuple[dict, list[str], tuple[str, ...]]:
    """Fields for a kind of attention the fit had no timings of, a warning for each such kind,
    and the fit's parameters of that kind (which the profile then does not use).

    A kind is missing when none of its parameters fits a point (``active``): a table of prefill
    chunks alone, of decodes alone, or (varlen) of prefills and mixed batches without a batch of
    decodes alone. Such a fit still switches the profile to the fitted attention form, which
    prices every kind; the missing kind's fields would be the base's roofline zeros (a profile
    that does not load) or values no point constrains. That kind keeps the base's fields: a
    fitted base's kernels (and a varlen base's pricing of decodes beside a chunk, where the fit
    has none), or a roofline base's attention rates (π_attn, β_attn, no fixed terms)."""
    changes, warnings, unused = {}, [], []
    fitted_base = base.attn_form != "roofline"
    how = (
        f"kept from {base.name}'s fitted attention"
        if fitted_base
        else f"priced at {base.name}'s attention rates (π {base.pi_attention:.4g} FLOP/s, β {base.beta_attention:.4g} B/s)"
    )
    for kind, side, rates, what in (
        (
            "decode",
            DECODE_SIDE,
            dict(attn_decode_pi=base.pi_attention, beta_attn=base.beta_attention),
            "no decode timings (a batch of one query row per sequence)",
        ),
        (
            "prefill",
            PREFILL_SIDE,
            dict(pi_attn=base.pi_attention, attn_prefill_beta=base.beta_attention),
            "no prefill timings",
        ),
    ):
        mine = [p for p in att.params if fields.get(f"attention.{p}") in side]
        if any(att.active.get(p, 0) for p in mine):
            continue
        changes.update({f: getattr(base, f) for f in side})
        if not fitted_base:
            changes.update(rates)
        unused += [f"attention.{p}" for p in mine]
        warnings.append(f"attention: {what}; {kind} attention is {how}")
    if warnings and base.attn_form == "varlen" and "pi_mixed" not in att.params:
        changes.update(attn_form="varlen", attn_mixed_pi=base.attn_mixed_pi, attn_mixed_seq_s=base.attn_mixed_seq_s)
    return changes, warnings, tuple(unused)


def cpu_base() -> Hardware:
    """A stand-in base for ``--device cpu``: this machine's memory; the peaks become the fitted values."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Hardware("cpu", float(mem), 1.0, 1.0, 1.0, 1.0, description=f"this machine's CPU ({os.cpu_count()} cores)")


def fitted_parameters(hw: Hardware) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names, values, covariance of ln values) recorded in a calibrated profile."""
    cal = hw.calibration or {}
    cov = cal.get("log_covariance") or {}
    names = list(cov.get("names") or [])
    values = np.array([cal["parameters"][n]["value"] for n in names], dtype=float)
    return names, values, np.array(cov.get("matrix") or np.zeros((0, 0)), dtype=float)
