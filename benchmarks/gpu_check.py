"""The GPU check, prepared once: seed 000's own scene measured on one GPU, next to chunksim's prediction.

    python benchmarks/gpu_check.py --out gpu_check/            # ≤ 10 minutes on an H100 / H200
    python benchmarks/gpu_check.py --out gpu_check/ --quick    # < 1 minute: fewer repeats, a small kernel plan
    python benchmarks/gpu_check.py --predict-only gpu_check/ --hardware gpu_check/fit/fitted.yaml

The scene (seed 000, "Chunked prefill"): Llama-3.1-8B on one GPU, 32 requests decoding at 2,048 tokens of
context, a 32,768-token prompt arrives; chunked at 2,048 tokens it rides beside the 32 decodes. Measured,
each a forward pass of a Hugging Face ``transformers`` model built from the shipped config.json
(costmodel/models/llama-3.1-8b.json less chunksim's ``_source``/``_provenance`` keys) with random bf16
weights, nothing downloaded:

  prefill       the whole 32,768-token prompt in one pass
  decode        32 sequences, one new token each over 2,048 cached
  decode_kv0    the same 32 decodes over an empty cache (the weight stream and launches alone)
  chunk_first   the prompt's first 2,048-token chunk (0 cached)
  chunk_last    its last chunk (30,720 cached tokens of its own)
  mixed_first / mixed_last   the chunk beside the 32 decodes: the engine's one pass, NOT run as one (below)

Attention: flash-attn's ``flash_attn_func`` when the package is installed (the kernel HF's
``flash_attention_2`` calls), else torch's ``scaled_dot_product_attention`` with ``enable_gqa`` (its
flash / efficient kernels; a lower-right causal bias for a chunk over a cached prefix). Either is
plugged into the HF model as a registered attention function that writes the step's new K and V into a
preallocated cache filled with random tensors (the layout ``[batch, tokens, kv_heads, head_dim]``,
written in place as a paged engine does) and attends over it: no DynamicCache concatenation (which
copies the whole cache every step) and no repeat of the KV heads. The LM head runs on each sequence's
last position only, as an engine samples. Steps of up to ``--graph-max-rows`` rows are also replayed
from a CUDA graph (engines capture their decode batches; HF's eager Python would otherwise set the
decode step's time): ``time_s`` is the graph's where one was captured, ``eager_s`` is kept beside it.

The mixed step. HF has no varlen batch of one chunk and 32 decodes at other contexts, so it is timed as
the SUM of its two parts, ``chunk + decode``, measured apart (``method`` "sum:..."). Bias: high. The
engine's one pass streams the 16 GB of weights once and launches each kernel once; the sum pays both
twice, about one ``decode_kv0`` step (~5-6 ms on an H100, +6-10 % of a 50-90 ms mixed step). The CSV
also carries ``measured_marginal_s = chunk + decode - decode_kv0`` (the decodes' attention and KV
read only), biased low by the 32 extra GEMM rows (<1 ms). The engine's true time lies between the two.
Padding the decodes into a 33-sequence batch of 2,048 rows each was the alternative; it prices 32
phantom chunks and is off by far more.

Also run: ``chunksim calibrate --measure --device cuda``'s own microbenchmark (costmodel/calibration/
microbench.py, its plan and timer; bf16 GEMMs of one layer, prefill and decode attention, copies),
and fp8 GEMMs of the same shapes through ``torch._scaled_mm`` where the GPU has fp8 (SM 8.9+; skipped
with a note otherwise). Warm-up, then repeats timed with CUDA events; medians. A deadline
(``--budget-s``) skips what would run past it, and every CSV is written as soon as its phase ends.

Writes into ``--out DIR``:
  steps.csv                  the directly measured steps, the ``steps`` format of ``chunksim calibrate``
                             (step, q_len, kv_len, time_s, dtype, hardware; one row per sequence)
  steps_mixed_sum.csv        the two mixed steps as sums, same format: hold them out
                             (``--holdout-steps steps``), don't fit them
  kernels.csv                the microbenchmark, the ``timings`` format (``calibrate --from timings``)
  kernels_fp8.csv            fp8 GEMMs, ``timings`` format with dtype fp8: fit apart from the bf16 rows
  scene_times.csv            one row per measured step: label, rows, time_s, eager_s, graph_s, mode
  predicted_vs_measured.csv  per scene step: chunksim's prediction (``--hardware``, default the
                             calibrated ``h100-sxm``), the measured time, the error in percent
  meta.json                  GPU, driver, torch / CUDA / transformers versions, attention kernel, notes

``--device cpu`` with a tiny ``--model`` config.json and a scaled-down scene (``--prompt-len``,
``--chunk``, ``--decodes``, ``--context``) runs the same code on the CPU (the smoke test does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodel import CostModel, load_hardware, load_model  # noqa: E402
from costmodel.errors import require  # noqa: E402

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
FULL_BUDGET_S = 570.0  # the whole run stops short of 10 minutes
QUICK_BUDGET_S = 50.0
MIXED_BIAS = (
    "sum of chunk and decode measured apart: high by about one weight stream and one set of "
    "launches (~decode_kv0); marginal = sum - decode_kv0: low by the 32 extra GEMM rows"
)


# ---- the scene (torch-free) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One forward pass: sequence i brings q_lens[i] new tokens over kv_lens[i] cached ones."""

    label: str
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    parts: tuple[str, ...] = ()  # a composite step: the measured steps whose times are summed
    less: tuple[str, ...] = ()  # ... and the one subtracted for the marginal estimate

    @property
    def rows(self) -> int:
        return int(sum(self.q_lens))

    def shape(self) -> str:
        """'1x2048@30720 + 32x1@2048': count x new tokens @ cached, per group of equal sequences."""
        groups: dict = {}
        for q, kv in zip(self.q_lens, self.kv_lens):
            groups[(q, kv)] = groups.get((q, kv), 0) + 1
        return " + ".join(f"{n}x{q}@{kv}" for (q, kv), n in groups.items())


@dataclass(frozen=True)
class Scene:
    """Seed 000's scene: a ``prompt``-token prompt, chunked at ``chunk``, beside ``decodes`` sequences
    decoding at ``context`` tokens of context."""

    prompt: int = 32768
    chunk: int = 2048
    decodes: int = 32
    context: int = 2048

    def __post_init__(self):
        for f in ("prompt", "chunk", "decodes", "context"):
            require(int(getattr(self, f)) >= 1, f, getattr(self, f), "must be a positive integer")
        require(self.chunk <= self.prompt, "chunk", self.chunk, f"must not exceed the prompt ({self.prompt})")

    @property
    def last_chunk_cached(self) -> int:
        """Tokens of its own the prompt's last full chunk finds cached: 30,720 for 32,768 / 2,048."""
        return self.prompt - self.chunk

    def measured_steps(self) -> list[Step]:
        """The forward passes run on the GPU, in the order they are run."""
        d, c = self.decodes, self.chunk
        return [
            Step("prefill", (self.prompt,), (0,)),
            Step("chunk_first", (c,), (0,)),
            Step("chunk_last", (c,), (self.last_chunk_cached,)),
            Step("decode", (1,) * d, (self.context,) * d),
            Step("decode_kv0", (1,) * d, (0,) * d),
        ]

    def mixed_steps(self) -> list[Step]:
        """The chunk beside the decodes: what the engine runs as one pass, timed as a sum of parts."""
        d, c = self.decodes, self.chunk
        dec_q, dec_kv = (1,) * d, (self.context,) * d
        return [
            Step("mixed_first", (c, *dec_q), (0, *dec_kv), ("chunk_first", "decode"), ("decode_kv0",)),
            Step(
                "mixed_last",
                (c, *dec_q),
                (self.last_chunk_cached, *dec_kv),
                ("chunk_last", "decode"),
                ("decode_kv0",),
            ),
        ]

    def steps(self) -> list[Step]:
        return self.measured_steps() + self.mixed_steps()


SEED_SCENE = Scene()


def predict(model, hw, steps: list[Step]) -> dict[str, float]:
    """chunksim's seconds for each step: ``CostModel.step_time(q_lens, kv_lens)``."""
    cm = CostModel(model, hw)
    return {s.label: float(cm.step_time(list(s.q_lens), list(s.kv_lens))) for s in steps}


def predicted_vs_measured(scene: Scene, measured: pd.DataFrame, model, hw) -> pd.DataFrame:
    """One row per scene step with a measured time (``measured``: scene_times.csv, columns label and
    time_s at least): prediction, measurement, error % = 100 (predicted - measured) / measured. A mixed
    step is measured as the sum of its parts (both present, else it is left out)."""
    require(
        {"label", "time_s"} <= set(measured.columns),
        "measured",
        list(measured.columns),
        "need the columns label and time_s",
    )
    t = {str(k): float(v) for k, v in zip(measured["label"], measured["time_s"]) if np.isfinite(float(v)) and v > 0}
    mode = dict(zip(measured["label"].astype(str), measured.get("mode", pd.Series(["direct"] * len(measured)))))
    steps = [s for s in scene.steps() if (all(p in t for p in s.parts) if s.parts else s.label in t)]
    pred = predict(model, hw, steps)
    rows = []
    for s in steps:
        if s.parts:
            meas = sum(t[p] for p in s.parts)
            low = meas - sum(t[p] for p in s.less) if all(p in t for p in s.less) else meas
            low = low if low > 0 else meas
            method, note = "sum:" + "+".join(s.parts), MIXED_BIAS
        else:
            meas = low = t[s.label]
            method, note = f"direct:{mode.get(s.label, 'direct')}", ""
        p = pred[s.label]
        rows.append(
            {
                "step": s.label,
                "shape": s.shape(),
                "rows": s.rows,
                "seqs": len(s.q_lens),
                "predicted_s": p,
                "measured_s": meas,
                "error_pct": 100.0 * (p - meas) / meas,
                "measured_marginal_s": low,
                "error_marginal_pct": 100.0 * (p - low) / low,
                "method": method,
                "hardware_profile": hw.name,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def steps_table(steps: list[Step], times: dict[str, float], dtype: str, hardware: str) -> pd.DataFrame:
    """The ``steps`` format of ``chunksim calibrate --from steps``: one row per sequence, the step's
    time repeated on each (costmodel/calibration/step_timings.py)."""
    rows = []
    for i, s in enumerate(steps):
        if s.label not in times:
            continue
        for q, kv in zip(s.q_lens, s.kv_lens):
            rows.append(
                {
                    "step": i,
                    "q_len": q,
                    "kv_len": kv,
                    "time_s": times[s.label],
                    "dtype": dtype,
                    "hardware": hardware,
                    "label": s.label,
                }
            )
    return pd.DataFrame(rows, columns=["step", "q_len", "kv_len", "time_s", "dtype", "hardware", "label"])


def write_predictions(out: Path, scene: Scene, model, hw) -> pd.DataFrame | None:
    path = out / "scene_times.csv"
    if not path.exists():
        return None
    measured = pd.read_csv(path)
    if measured.empty:
        return None
    pvm = predicted_vs_measured(scene, measured, model, hw)
    pvm.to_csv(out / "predicted_vs_measured.csv", index=False)
    return pvm


# ---- measuring (torch) ------------------------------------------------------------------------------


class Deadline:
    def __init__(self, budget_s: float, start: float | None = None):
        self.start = time.monotonic() if start is None else start
        self.end = self.start + budget_s

    def left(self) -> float:
        return self.end - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start


@dataclass
class Kv:
    """What the registered attention function reads: per-layer K and V caches ([batch, tokens,
    kv_heads, head_dim]) and where this step's new tokens go."""

    cache: dict
    prefix: int = 0


STATE = Kv({})
ATTN_NAME = "chunksim_gpu_check"


def attention_kernel(torch, device: str, notes: list):
    """(name, fn(query [b,h,q,d], K, V [b,L,hkv,d], scale) -> [b,q,h,d]): flash-attn where installed
    (CUDA), else SDPA with enable_gqa, probed once; without GQA support, K and V are repeated."""
    F = torch.nn.functional
    if device == "cuda":
        try:
            from flash_attn import flash_attn_func

            def fa(query, K, V, scale):
                q = query.shape[2]
                return flash_attn_func(query.transpose(1, 2), K, V, causal=q > 1, softmax_scale=scale)

            return "flash_attn", fa
        except ImportError:
            notes.append("flash-attn not installed: torch SDPA (enable_gqa) for attention")
    from torch.nn.attention.bias import causal_lower_right

    def sdpa(query, K, V, scale, gqa=True):
        k, v = K.transpose(1, 2), V.transpose(1, 2)
        q, L = query.shape[2], k.shape[2]
        rep = query.shape[1] // k.shape[1]
        kw = {}
        if rep > 1 and gqa:
            kw["enable_gqa"] = True
        elif rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if q == L:
            out = F.scaled_dot_product_attention(query, k, v, is_causal=True, scale=scale, **kw)
        elif q == 1:
            out = F.scaled_dot_product_attention(query, k, v, scale=scale, **kw)
        else:
            out = F.scaled_dot_product_attention(query, k, v, attn_mask=causal_lower_right(q, L), scale=scale, **kw)
        return out.transpose(1, 2)

    try:  # the three paths, GQA, on this device and dtype, with the math fallback ruled out on CUDA
        with fused_sdpa_only(torch, device):
            for q, L in ((4, 4), (1, 5), (4, 9)):
                Q = torch.randn(1, 4, q, 128, dtype=torch.bfloat16, device=device)
                K = torch.randn(1, L, 2, 128, dtype=torch.bfloat16, device=device)
                sdpa(Q, K, K, 0.125)
        return "sdpa+enable_gqa", sdpa
    except (TypeError, RuntimeError) as e:
        notes.append(f"SDPA enable_gqa unavailable ({type(e).__name__}: {e}); K and V heads repeated")
        return "sdpa+repeat_kv", lambda query, K, V, scale: sdpa(query, K, V, scale, gqa=False)


def fused_sdpa_only(torch, device: str):
    """On CUDA, SDPA's fused kernels only (flash, memory-efficient, cuDNN): its math fallback would
    materialise the 32k x 32k scores (137 GB) and time something no engine runs; it fails instead."""
    if device != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
    return sdpa_kernel([getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)])


def register_attention(kernel) -> None:
    """The HF attention function: write the new K, V into the step's cache at [prefix, prefix + q),
    attend over the cache up to there; the caller's mask is ignored (causal by shape: bottom-right)."""
    from transformers import AttentionInterface

    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        K, V = STATE.cache[module.layer_idx]
        p, q = STATE.prefix, key.shape[2]
        K[:, p : p + q].copy_(key.transpose(1, 2))
        V[:, p : p + q].copy_(value.transpose(1, 2))
        return kernel(query, K[:, : p + q], V[:, : p + q], scaling), None

    AttentionInterface.register(ATTN_NAME, attend)


def hf_config(model_path: Path):
    """The config.json as transformers reads it, chunksim's own keys (``_source``, ``_provenance``) dropped."""
    from transformers import AutoConfig

    cfg = {k: v for k, v in json.loads(model_path.read_text()).items() if not k.startswith("_")}
    return AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def model_json(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return p
    shipped = ROOT / "costmodel" / "models" / f"{name_or_path}.json"
    require(shipped.is_file(), "model", name_or_path, "a shipped model name or a config.json path")
    return shipped


def build_model(torch, cfg, device: str, dtype):
    from transformers import AutoModelForCausalLM

    cfg._attn_implementation = ATTN_NAME
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=ATTN_NAME)
    finally:
        torch.set_default_dtype(old)
    return model.to(device=device, dtype=dtype).eval()


def step_runner(torch, model, step: Step, device: str, dtype, cfg):
    """(forward fn, cache): a batch of equal sequences (the measured steps all are), its cache
    filled with random K, V for the cached tokens, the new tokens' slots after them."""
    require(len(set(step.q_lens)) == 1 and len(set(step.kv_lens)) == 1, "step", step.label, "unequal sequences")
    b, q, kv = len(step.q_lens), step.q_lens[0], step.kv_lens[0]
    hkv = cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cache = {
        i: (
            torch.randn(b, kv + q, hkv, d, dtype=dtype, device=device),
            torch.randn(b, kv + q, hkv, d, dtype=dtype, device=device),
        )
        for i in range(cfg.num_hidden_layers)
    }
    ids = torch.randint(0, cfg.vocab_size, (b, q), device=device)
    pos = torch.arange(kv, kv + q, device=device).unsqueeze(0).expand(b, q)
    body, head = model.model, model.lm_head

    def forward():
        STATE.cache, STATE.prefix = cache, kv
        h = body(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
        return head(h[:, -1:, :])

    return forward, cache


def timer(torch, device: str):
    from costmodel.calibration import microbench

    if device == "cuda":
        return lambda fn, w, r: microbench._cuda_timer(torch, fn, w, r)

    def cpu(fn, w, r):
        return microbench._time_cpu(fn, w, r)

    return cpu


def sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def fitted_repeats(torch, fn, device: str, warmup: int, repeats: int, deadline: Deadline, share: float):
    """One call to learn its time, then as many (warmup, repeats) as fit in ``share`` of what is left."""
    t0 = time.monotonic()
    fn()
    sync(torch, device)
    one = max(time.monotonic() - t0, 1e-6)
    fit = int(share * max(deadline.left(), 0.0) / one)
    if fit < 2:
        return None
    w = min(warmup, max(fit // 4, 0))
    return w, max(1, min(repeats, fit - w))


def capture_graph(torch, fn):
    """A CUDA graph of ``fn`` (side-stream warm-up first, as torch asks), or None where capture fails."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def measure_scene(torch, model, cfg, scene: Scene, args, deadline: Deadline, notes: list, out: Path) -> dict:
    """Eager (and graph) medians of each measured step; scene_times.csv and steps.csv written after each."""
    dtype, dev = torch.bfloat16, args.device
    time_fn = timer(torch, dev)
    steps = scene.measured_steps()
    rows, chosen = [], {}
    for i, step in enumerate(steps):
        left_steps = len(steps) - i
        if deadline.left() < 5:
            notes.append(f"{step.label}: skipped, the deadline was near")
            continue
        forward, cache = None, None
        try:
            forward, cache = step_runner(torch, model, step, dev, dtype, cfg)
            with torch.no_grad(), fused_sdpa_only(torch, dev):
                reps = fitted_repeats(
                    torch, forward, dev, args.warmup, args.repeats, deadline, args.scene_share / left_steps
                )
                if reps is None:
                    notes.append(f"{step.label}: skipped, one call would not fit before the deadline")
                    continue
                eager = time_fn(forward, *reps)
                graph = float("nan")
                if dev == "cuda" and not args.no_graphs and step.rows <= args.graph_max_rows:
                    try:
                        g = capture_graph(torch, forward)
                        graph = time_fn(g.replay, *reps)
                        del g
                    except Exception as e:  # noqa: BLE001 - any capture failure falls back to eager
                        notes.append(f"{step.label}: CUDA graph capture failed ({type(e).__name__}: {e}); eager")
        except (RuntimeError, MemoryError) as e:  # out of memory, or no fused attention kernel for the shape
            notes.append(f"{step.label}: {type(e).__name__}: {e}; skipped")
            continue
        finally:
            del forward, cache
            if dev == "cuda":
                torch.cuda.empty_cache()
        mode = "graph" if np.isfinite(graph) else "eager"
        chosen[step.label] = graph if mode == "graph" else eager
        rows.append(
            {
                "label": step.label,
                "shape": step.shape(),
                "rows": step.rows,
                "seqs": len(step.q_lens),
                "time_s": chosen[step.label],
                "eager_s": eager,
                "graph_s": graph,
                "mode": mode,
                "warmup": reps[0],
                "repeats": reps[1],
            }
        )
        pd.DataFrame(rows).to_csv(out / "scene_times.csv", index=False)
        steps_table(steps, chosen, "bf16", args.hardware_name).to_csv(out / "steps.csv", index=False)
        mixed = {}
        for s in scene.mixed_steps():
            if all(p in chosen for p in s.parts):
                mixed[s.label] = sum(chosen[p] for p in s.parts)
        steps_table(scene.mixed_steps(), mixed, "bf16", args.hardware_name).to_csv(
            out / "steps_mixed_sum.csv", index=False
        )
        print(f"  {step.label:12s} {step.shape():28s} {1e3 * chosen[step.label]:10.3f} ms ({mode})", flush=True)
    return chosen


def kernel_plan(model, args):
    """The microbenchmark's plan: ``calibrate --measure --device cuda``'s own (model_plan, bf16), a
    handful of its shapes with --quick, or a tiny CPU one (numpy: float32)."""
    from costmodel.calibration.microbench import build_plan, model_plan

    if args.device == "cuda" and not args.quick:
        return model_plan(model, 1, "bfloat16")
    if args.device == "cuda":
        return build_plan(
            model.H,
            model.h,
            model.h_kv,
            model.ffn,
            [1, 16, 128, 512, 2048],
            [(512, 0), (2048, 0), (2048, 16384)],
            [(32, 2048), (64, 4096), (8, 16384)],
            [1 << 20, 1 << 24, 1 << 28],
            "bfloat16",
            warmup=2,
            repeats=5,
        )
    return build_plan(
        model.H,
        model.h,
        model.h_kv,
        model.ffn,
        [1, 16, 64],
        [(32, 0), (32, 64)],
        [(2, 64), (4, 128)],
        [1 << 14, 1 << 16, 1 << 18],
        "float32",
        warmup=1,
        repeats=2,
    )


def measure_kernels(model, args, deadline: Deadline, notes: list, out: Path) -> pd.DataFrame | None:
    """The microbenchmark, a slice of the plan at a time so that the deadline can stop it between."""
    from costmodel.calibration.microbench import Plan, measure
    from costmodel.calibration.timings import write_timings_csv

    plan = kernel_plan(model, args)
    frames, step = [], 16
    for i in range(0, len(plan.kernels), step):
        if deadline.left() < args.reserve_s:
            notes.append(f"microbenchmark stopped at the deadline after {i} of {len(plan.kernels)} kernels")
            break
        part = Plan(plan.kernels[i : i + step], plan.dtype, plan.warmup, plan.repeats)
        frames.append(measure(part, args.device).assign(source=f"gpu_check:microbench:{args.device}"))
        write_timings_csv(pd.concat(frames, ignore_index=True), out / "kernels.csv")
    return pd.concat(frames, ignore_index=True) if frames else None


def fp8_supported(torch) -> str | None:
    """None where fp8 GEMMs can run, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm"
    cap = torch.cuda.get_device_capability()
    if cap < (8, 9):
        return f"compute capability {cap[0]}.{cap[1]} < 8.9 (no fp8 tensor cores)"
    return None


def measure_fp8(torch, model, args, deadline: Deadline, notes: list, out: Path) -> pd.DataFrame | None:
    """One layer's GEMMs in fp8 (e4m3, per-tensor scales, bf16 out) via torch._scaled_mm: the
    ``timings`` table with dtype fp8 (weights and activations 1 byte, output 2)."""
    from costmodel.calibration.microbench import _cuda_timer
    from costmodel.calibration.timings import gemm_row, layer_gemm_shapes, validate, write_timings_csv
    from costmodel.gemm_tiles import element_bytes

    why = fp8_supported(torch) if args.device == "cuda" else "--device cpu"
    if why:
        notes.append(f"fp8 GEMMs skipped: {why}")
        return None
    shapes = layer_gemm_shapes(model.H, model.h, model.h_kv, model.ffn, True, 1)
    tokens = [16, 2048] if args.quick else [16, 64, 256, 1024, 2048, 4096, 8192]
    warmup, repeats = (2, 5) if args.quick else (5, 20)
    bw, bx = element_bytes("fp8")
    one = torch.ones((), dtype=torch.float32, device="cuda")
    rows = []
    for m in tokens:
        for op, (k, n) in shapes.items():
            if deadline.left() < args.reserve_s:
                notes.append("fp8 GEMMs stopped at the deadline")
                break
            k, n = int(k), int(n)
            a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major (k, n)

            def mm(a=a, w=w):
                r = torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                return r[0] if isinstance(r, tuple) else r

            try:
                t = _cuda_timer(torch, mm, warmup, repeats)
            except RuntimeError as e:
                notes.append(f"fp8 GEMM {op} m={m}: {e}")
                continue
            row = gemm_row(op, m, k, n, 2, t, dtype="fp8", source="gpu_check:fp8:_scaled_mm")
            row["bytes"] = bw * k * n + bx * m * k + 2.0 * m * n
            rows.append(row)
    if not rows:
        return None
    df = validate(pd.DataFrame(rows), "gpu_check:fp8")
    write_timings_csv(df, out / "kernels_fp8.csv")
    return df


def device_meta(torch, args, attention: str) -> dict:
    import transformers

    meta = {
        "device": args.device,
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "attention": attention,
    }
    try:
        import flash_attn

        meta["flash_attn"] = flash_attn.__version__
    except ImportError:
        meta["flash_attn"] = None
    if args.device == "cuda":
        p = torch.cuda.get_device_properties(0)
        meta.update(
            gpu=p.name,
            gpu_memory_bytes=int(p.total_memory),
            compute_capability=f"{p.major}.{p.minor}",
            sms=int(p.multi_processor_count),
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            meta["nvidia_smi"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
            meta["driver"] = meta["nvidia_smi"].split(",")[0].strip() if meta["nvidia_smi"] else None
        except (OSError, subprocess.SubprocessError, IndexError):
            meta["driver"] = None
    else:
        meta["gpu"] = None
        meta["cpu"] = platform.processor() or platform.machine()
    return meta


# ---- the command ------------------------------------------------------------------------------------


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=False, help="folder for the CSVs and meta.json")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--quick", action="store_true", help="< 1 minute: fewer repeats, a small kernel plan")
    p.add_argument("--model", default=DEFAULT_MODEL, help="shipped model name or a config.json path")
    p.add_argument("--hardware", default=DEFAULT_HARDWARE, help="profile for the predictions (name or YAML)")
    p.add_argument("--prompt-len", type=int, default=SEED_SCENE.prompt)
    p.add_argument("--chunk", type=int, default=SEED_SCENE.chunk)
    p.add_argument("--decodes", type=int, default=SEED_SCENE.decodes)
    p.add_argument("--context", type=int, default=SEED_SCENE.context)
    p.add_argument("--warmup", type=int, help="warm-up calls per scene step (default 3, quick 1)")
    p.add_argument("--repeats", type=int, help="timed calls per scene step (default 10, quick 3)")
    p.add_argument(
        "--budget-s", type=float, help=f"stop by then (default {FULL_BUDGET_S:.0f}, quick {QUICK_BUDGET_S:.0f})"
    )
    p.add_argument("--reserve-s", type=float, default=5.0, help="seconds kept for writing the results")
    p.add_argument("--scene-share", type=float, default=0.6, help="share of the budget the scene steps may use")
    p.add_argument("--graph-max-rows", type=int, default=4096, help="steps of up to this many rows: CUDA graph too")
    p.add_argument("--no-graphs", action="store_true", help="eager only")
    p.add_argument("--skip-kernels", action="store_true", help="the scene only: no microbenchmark, no fp8")
    p.add_argument(
        "--predict-only",
        metavar="DIR",
        help="rewrite DIR/predicted_vs_measured.csv from DIR/scene_times.csv with --hardware; no torch",
    )
    args = p.parse_args(argv)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.repeats = args.repeats if args.repeats is not None else (3 if args.quick else 10)
    args.budget_s = args.budget_s or (QUICK_BUDGET_S if args.quick else FULL_BUDGET_S)
    require(args.out or args.predict_only, "out", None, "give --out DIR (or --predict-only DIR)")
    return args


def main(argv=None) -> int:
    start = time.monotonic()
    args = parse(argv)
    scene = Scene(args.prompt_len, args.chunk, args.decodes, args.context)
    model_path = model_json(args.model)
    spec, hw = load_model(str(model_path)), load_hardware(args.hardware)
    if args.predict_only:
        pvm = write_predictions(Path(args.predict_only), scene, spec, hw)
        require(pvm is not None, "predict-only", args.predict_only, "holds no scene_times.csv rows")
        print(pvm.to_string(index=False))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(args.budget_s, start)
    import torch

    if args.device == "cuda":
        require(torch.cuda.is_available(), "device", "cuda", "torch sees no CUDA device (use --device cpu)")
    else:
        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    notes: list[str] = []
    attention, kernel = attention_kernel(torch, args.device, notes)
    register_attention(kernel)
    args.hardware_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    meta = device_meta(torch, args, attention)
    meta.update(
        scene=asdict(scene),
        model=str(model_path),
        prediction_profile=hw.name,
        quick=args.quick,
        budget_s=args.budget_s,
        mixed_step=MIXED_BIAS,
        notes=notes,
    )

    def write_meta():
        meta["elapsed_s"] = deadline.elapsed()
        (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))

    write_meta()
    print(f"gpu_check: {meta.get('gpu') or 'cpu'}, torch {torch.__version__}, attention {attention}", flush=True)
    cfg = hf_config(model_path)
    t0 = time.monotonic()
    model = build_model(torch, cfg, args.device, torch.bfloat16)
    meta["model_build_s"] = time.monotonic() - t0
    print(f"model built in {meta['model_build_s']:.1f} s; scene steps:", flush=True)
    measure_scene(torch, model, cfg, scene, args, deadline, notes, out)
    del model
    if args.device == "cuda":
        torch.cuda.empty_cache()
    write_meta()
    pvm = write_predictions(out, scene, spec, hw)
    if pvm is not None:
        print(pvm[["step", "shape", "predicted_s", "measured_s", "error_pct", "method"]].to_string(index=False))
    if not args.skip_kernels:
        kernels = measure_kernels(spec, args, deadline, notes, out)
        print(f"microbenchmark: {0 if kernels is None else len(kernels)} kernels", flush=True)
        fp8 = measure_fp8(torch, spec, args, deadline, notes, out)
        print(f"fp8 GEMMs: {0 if fp8 is None else len(fp8)}", flush=True)
    write_meta()
    for n in notes:
        print(f"note: {n}")
    print(f"wrote {out} in {deadline.elapsed():.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
