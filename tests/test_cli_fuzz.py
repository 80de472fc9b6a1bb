"""The CLI's promise on bad input, table-driven across every verb and file kind: exit 2, exactly
one stderr line naming the field, no traceback; nothing simulated first. Plus Hypothesis
strategies that corrupt config.json, hardware / experiment / sweep YAML and trace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_helpers import assert_one_line_error, run_cli
from hypothesis import HealthCheck, given, settings, strategies as st

ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads((ROOT / "costmodel" / "models" / "llama-3.1-8b.json").read_text())
H100 = yaml.safe_load((ROOT / "costmodel" / "hardware" / "h100.yaml").read_text())
MOONCAKE = ROOT / "workloads" / "fixtures" / "mooncake_conv_30.jsonl"
NOT_UTF8 = b"\xff\xfe\x00bad \xc3\x28 bytes\n"


def _config(**changes) -> str:
    d = {**LLAMA, **changes}
    return json.dumps({k: v for k, v in d.items() if v is not ...})


FILES = {  # name -> content (str or bytes)
    "afile": "x",
    "bin.bin": NOT_UTF8,
    "cfg_utf8.json": NOT_UTF8,
    "cfg_syntax.json": '{"hidden_size": 4096,',
    "cfg_list.json": "[1, 2, 3]",
    "cfg_str.json": _config(hidden_size="4096"),
    "cfg_nan.json": _config(hidden_size=4096).replace('"hidden_size": 4096', '"hidden_size": NaN'),
    "cfg_float.json": _config(num_hidden_layers=32.5),
    "cfg_bool_layers.json": _config(num_hidden_layers=True),
    "cfg_zero_heads.json": _config(num_attention_heads=0),
    "cfg_zero_kv.json": _config(num_key_value_heads=0),
    "cfg_indivisible.json": _config(num_key_value_heads=7),
    "cfg_neg_vocab.json": _config(vocab_size=-5),
    "cfg_missing.json": _config(hidden_size=..., vocab_size=...),
    "cfg_layers_list.json": _config(num_hidden_layers=[32]),
    "cfg_tied_str.json": _config(tie_word_embeddings="yes"),
    "cfg_text_config.json": _config(text_config=[1]),
    "cfg_quant.json": _config(quantization_config={"quant_method": "bitsandbytes"}),
    "hw_utf8.yaml": NOT_UTF8,
    "hw_syntax.yaml": "name: x\n  bad: [unclosed\n",
    "hw_list.yaml": "- 1\n- 2\n",
    "hw_unknown.yaml": yaml.safe_dump({**H100, "warp_speed": 9}),
    "hw_str.yaml": yaml.safe_dump({**H100, "step_overhead_s": "abc"}),
    "hw_neg.yaml": yaml.safe_dump({**H100, "memory_bytes": -1}),
    "hw_bool.yaml": yaml.safe_dump({**H100, "pi_eff": True}),
    "exp_utf8.yaml": NOT_UTF8,
    "exp_syntax.yaml": "policy: [vllm\n",
    "exp_list.yaml": "- policy\n",
    "exp_unknown.yaml": "polcy: vllm\n",
    "exp_engine_unknown.yaml": "engine: {max_num_seq: 4}\n",
    "exp_engine_bool.yaml": "engine: {max_num_seqs: true}\n",
    "exp_tp.yaml": "tp: 0\n",
    "exp_seed.yaml": "seed: -1\n",
    "exp_policy.yaml": "policy: tgi\n",
    "exp_workload.yaml": "workload: 5\n",
    "exp_goodput.yaml": "goodput: {ttfx: 5}\n",
    "exp_wl_kind.yaml": "workload: {kind: zipf}\n",
    "exp_lengths.yaml": "workload: {kind: poisson, num_prompts: 4, lengths: {kind: fixed, input_len: -3, "
    "output_len: 4}}\n",
    "exp_trace_path.yaml": "workload: {kind: trace, trace: {path: nofile.csv, format: azure}}\n",
    "exp_block.yaml": "engine: {block_size: 7}\n",
    "sw_wl_lengths.yaml": "workload: {kind: poisson, num_prompts: 4, lengths: {kind: fixed, input_len: 0, "
    "output_len: 4}}\n",
    "sw_utf8.yaml": NOT_UTF8,
    "sw_syntax.yaml": "grid: {vllm: [1,\n",
    "sw_unknown.yaml": "grdi: {}\n",
    "sw_grid_list.yaml": "grid: {vllm: {max_num_batched_tokens: 512}}\n",
    "sw_grid_str.yaml": "grid: {vllm: {max_num_batched_tokens: [a, b]}}\n",
    "sw_rates.yaml": "request_rates: [-1]\n",
    "sw_slo_key.yaml": "slo: {itl: 50}\n",
    "sw_slo_neg.yaml": "slo: {itl_ms: -5}\n",
    "sw_tp.yaml": "tp: x\n",
    "sw_list.yaml": "- 1\n",
    "sw_tp_list.yaml": "tp: [1, x]\n",
    "sw_router.yaml": "router: []\n",
    "sw_price.yaml": "gpu_hourly_price: -2\n",
    "sw_replicas.yaml": "replicas: [0]\n",
    "trace_utf8.csv": NOT_UTF8,
    "trace_utf8.jsonl": NOT_UTF8,
    "trace_badline.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]}\n{"timestamp": 1,\n',
    "trace_notobj.jsonl": "[1, 2]\n",
    "trace_missing.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
    "trace_empty.csv": "",
    "trace_neg.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-3,5\n",
    "trace_generic.csv": "t,p,o\n0.0,10,5\n0.5,20,6\n",
    "trace.txt": "hello\n",
    "batch_utf8.csv": NOT_UTF8,
    "batch_cols.csv": "q,kv\n1,2\n",
    "batch_val.csv": "q_len,kv_len\n1,x\n",
    "batch_empty.csv": "q_len,kv_len\n",
}

SIM = ["simulate", "--num-prompts", "5"]
SGL_DPA = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --dp 4 --enable-dp-attention"
ENGINE_INTS = [
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--max-prefill-tokens",
    "--page-size",
    "--max-model-len",
    "--num-gpu-blocks-override",
    "--max-total-tokens",
    "--max-running-requests",
    "--block-size",
    "--context-length",
]
CASES = []  # (argv, field)
for flag in ENGINE_INTS:
    for bad in ("0", "-5", "abc", "1.5"):
        CASES.append((SIM + [flag, bad], flag.lstrip("-")))
for bad in ("0", "-5", "abc", "1.5"):
    if bad not in ("0", "-5"):  # SGLang reads any size <= 0 as chunking off
        CASES.append((SIM + ["--chunked-prefill-size", bad], "chunked-prefill-size"))
    CASES.append(
        (SIM + ["--long-prefill-token-threshold", bad if bad != "0" else "-1"], "long-prefill-token-threshold")
    )
for flag in ("--gpu-memory-utilization", "--mem-fraction-static"):
    for bad in ("0", "1.5", "-1", "abc"):
        CASES.append((SIM + [flag, bad], flag.lstrip("-")))
CASES += [
    (SIM + [f, v], f.lstrip("-"))
    for f, v in [
        ("--num-prompts", "0"),
        ("--num-prompts", "x"),
        ("--input-len", "0"),
        ("--output-len", "-2"),
        ("--request-rate", "0"),
        ("--request-rate", "-1"),
        ("--request-rate", "fast"),
        ("--burstiness", "0"),
        ("--max-concurrency", "0"),
        ("--random-range-ratio", "1"),
        ("--random-range-ratio", "-0.1"),
        ("--random-range-ratio", '{"input": 0.3}'),
        ("--random-prefix-len", "-1"),
        ("--seed", "-1"),
        ("--seed", "x"),
        ("--replicas", "0"),
        ("--tp", "0"),
        ("--tensor-parallel-size", "x"),
        ("--ramp-up-strategy", "cubic"),
        ("--ramp-up-start-rps", "inf"),
        ("--policy", "tgi"),
        ("--uncertainty", "0"),
        ("--time-unit", "h"),
        ("--trace-format", "parquet"),
        ("--dataset-name", "imagenet"),
        ("--result-format", "tgi"),
        ("--prefix-repetition-num-prefixes", "0"),
        ("--sharegpt-output-len", "0"),
    ]
]
CASES += [
    (SIM + ["--num-prompts", str(10**12)], "--num-prompts"),
    (["simulate", "--dataset-name", "hf"], "--dataset-name"),
    (["simulate", "--dataset-name", "burstgpt"], "--dataset-name"),
    (["simulate", "--dataset-name", "custom"], "--dataset-name"),
    (["simulate", "--dataset-name", "random-mm"], "--dataset-name"),
    (["simulate", "--dataset-name", "timed_trace"], "--dataset-name"),
    (SIM + ["--dataset-name", "sharegpt", "--random-input-len", "5"], "--random-input-len"),
    (SIM + ["--dataset-name", "random", "--prefix-repetition-prefix-len", "5"], "--prefix-repetition-prefix-len"),
    (SIM + ["--input-len", "5", "--random-input-len", "5"], "--random-input-len"),
    (SIM + ["--dataset-name", "sharegpt", "--input-len", "3"], "--input-len"),
    (SIM + ["--dataset-name", "random", "--scenario", "stall"], "--dataset-name"),
    (SIM + ["--dataset-name", "sharegpt", "--dataset-path", "{d}/missing.csv"], "missing.csv"),
    (SIM + ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "--ramp-up-end-rps"),
    (SIM + ["--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"], "--ramp-up-strategy"),
    (
        SIM
        + ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--request-rate", "3"],
        "--request-rate",
    ),
    (
        SIM + ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "2"],
        "--ramp-up-start-rps",
    ),
    (SIM + ["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
    (SIM + ["--percentile-metrics", ","], "--percentile-metrics"),
    (SIM + ["--metric-percentiles", "x"], "--metric-percentiles"),
    (SIM + ["--metric-percentiles", "101"], "--metric-percentiles"),
    (SIM + ["--metric-percentiles", "-1"], "--metric-percentiles"),
    (SIM + ["--metadata", "a=b"], "--metadata"),
    (SIM + ["--save-result", "--metadata", "novalue"], "--metadata"),
    (SIM + ["--save-detailed"], "--save-detailed"),
    (SIM + ["--result-dir", "{d}/r"], "--result-dir"),
    (SIM + ["--save-result", "--result-dir", "{d}/afile"], "--result-dir"),
    (SIM + ["--save-result", "--result-dir", "{d}/r", "--result-filename", "a/b.json"], "--result-filename"),
    (SIM + ["--label", "x"], "--label"),
    (SIM + ["--goodput", "ttfx:5"], "goodput"),
    (SIM + ["--goodput", "ttft:abc"], "goodput"),
    (SIM + ["--goodput", "ttft:-1"], "goodput"),
    (SIM + ["--out", "{d}/afile"], "--out"),
    (SIM + ["--out", "{d}/afile/sub"], "--out"),
    (SIM + ["--trace", "{d}"], "--trace"),
    (SIM + ["--trace", "{d}/afile/run.json"], "--trace"),
    (SIM + ["--plots", "{d}/afile"], "--plots"),
    (SIM + ["--router", "random_walk"], "router"),
    (SIM + ["--policy", "sglang", "--max-num-seqs", "4"], "flags"),
    (SIM + ["--engine-cmd", ""], "--engine-cmd"),
    (SIM + ["--engine-cmd", "docker run vllm"], "--engine-cmd"),
    (SIM + ["--engine-cmd", "vllm serve unknown/model-7b"], "unknown/model-7b"),
    (SIM + ["--engine-cmd", "vllm serve m --pipeline-parallel-size 2"], "--pipeline-parallel-size"),
    (SIM + ["--engine-cmd", "vllm serve m --enable-lora"], "--enable-lora"),
    (SIM + ["--prefill-cmd", "vllm serve Qwen/Qwen3-8B"], "--decode-cmd"),
    (
        SIM + ["--prefill-cmd", "vllm serve Qwen/Qwen3-8B", "--decode-cmd", "vllm serve Qwen/Qwen3-32B"],
        "--decode-cmd model",
    ),
    (SIM + ["--engine-cmd", "vllm serve Qwen/Qwen3-8B", "--prefill-cmd", "vllm serve Qwen/Qwen3-8B"], "--engine-cmd"),
    (
        SIM + ["--engine-cmd", "python -m sglang.launch_server --model-path m --schedule-policy lpm"],
        "--schedule-policy",
    ),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs abc"], "--max-num-seqs"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs"], "--max-num-seqs"),
    (SIM + ["--engine-cmd", "python -m sglang.launch_server --context-length x"], "--context-length"),
    (SIM + ["--engine-cmd", "vllm serve 'meta-llama/Llama-3.1-8B"], "--engine-cmd"),
    (SIM + ["--engine-cmd", "python -m sglang.launch_server meta-llama/Llama-3.1-8B"], "--engine-cmd"),
    (SIM + ["--engine-cmd", "vllm serve a b"], "--engine-cmd"),
    (SIM + ["--engine-cmd", "python -m sglang.launch_server --enable-mixed-chunk=1"], "--enable-mixed-chunk"),
    (SIM + ["--engine-cmd", "vllm serve --model"], "--model"),
    (
        SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --max-num-batched-tokens 0"],
        "--max-num-batched-tokens",
    ),
    (SIM + ["--workload-file", "{d}/missing.csv"], "missing.csv"),
    (SIM + ["--workload-file", "{d}/trace_utf8.csv"], "trace_utf8.csv"),
    (SIM + ["--workload-file", "{d}/trace_utf8.jsonl"], "trace_utf8.jsonl"),
    (SIM + ["--workload-file", "{d}/trace_badline.jsonl"], "trace_badline.jsonl:2"),
    (SIM + ["--workload-file", "{d}/trace_notobj.jsonl"], "trace_notobj.jsonl:1"),
    (SIM + ["--workload-file", "{d}/trace_missing.csv"], "trace_missing.csv"),
    (SIM + ["--workload-file", "{d}/trace_empty.csv"], "trace_empty.csv"),
    (SIM + ["--workload-file", "{d}/trace_neg.csv"], "trace_neg.csv"),
    (SIM + ["--workload-file", "{d}/trace.txt"], "trace-format"),
    (SIM + ["--workload-file", "{d}/trace_generic.csv", "--trace-format", "csv"], "columns"),
    (
        SIM + ["--workload-file", "{d}/trace_generic.csv", "--trace-format", "csv", "--trace-columns", "arrival"],
        "--trace-columns",
    ),
    (
        SIM + ["--workload-file", "{d}/trace_generic.csv", "--trace-format", "csv", "--trace-columns", "foo=t"],
        "--trace-columns",
    ),
    (
        SIM
        + [
            "--workload-file",
            "{d}/trace_generic.csv",
            "--trace-format",
            "csv",
            "--trace-columns",
            "arrival=t,prompt_len=p,output_len=zz",
        ],
        "zz",
    ),
    (SIM + ["--trace-columns", "arrival=t,prompt_len=p,output_len=o"], "--trace-columns"),
    (SIM + ["--time-unit", "ms"], "--time-unit"),
    (SIM + ["--trace-format", "csv"], "trace-format"),
    (SIM + ["--block-size", "7"], "block-size"),
    (SIM + ["--block-size", "24"], "block-size"),
    (SIM + ["--goodput", "ttft:nan"], "goodput"),
    (SIM + ["--scenario", "stall", "--workload-file", "{d}/trace_generic.csv"], "--scenario"),
    (
        SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --max-num-batched-token 2048"],
        "did you mean --max-num-batched-tokens",
    ),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --max-num-seq=8"], "did you mean --max-num-seqs"),
    (
        SIM + ["--engine-cmd", "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --chunked-prefil-size 512"],
        "did you mean --chunked-prefill-size",
    ),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --chunked-prefill-size 512"], "--chunked-prefill-size"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --block-size 7"], "--block-size"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B -dp 0"], "-dp"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --data-parallel-size x"], "--data-parallel-size"),
    (
        SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --gpu-memory-utilization nan"],
        "--gpu-memory-utilization",
    ),
    (SIM + ["--engine-cmd", "CUDA_VISIBLE_DEVICES=0 docker run vllm"], "--engine-cmd"),
    (SIM + ["--quantization", "bitsandbytes"], "quantization"),
    (SIM + ["--kv-cache-dtype", "fp8_inc"], "kv-cache-dtype"),
    (SIM + ["--dtype", "float32"], "dtype"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B -q gguf"], "-q"),
    (SIM + ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B --quantization modelopt"], "quantization"),
    (SIM + ["--quantization", "awq", "--hardware", "h100-sxm"], "quantization"),
    (SIM + ["--quantization", "w8a8_int8", "--policy", "sglang", "--hardware", "rtx-pro-6000"], "quantization"),
    (SIM + ["--model", "{d}/cfg_quant.json"], "quant_method"),
    (SIM + ["--moe-a2a-backend", "pplx"], "moe-a2a-backend"),
    (SIM + ["--deepep-mode", "fast"], "deepep-mode"),
    (SIM + ["--all2all-backend", "mori_low_latency"], "all2all-backend"),
    (SIM + ["--ep-size", "0"], "ep-size"),
    (SIM + ["--moe-skew", "-1"], "moe-skew"),
    (SIM + ["--policy", "sglang", "--enable-two-batch-overlap"], "enable_two_batch_overlap"),
    (SIM + ["--engine-cmd", "vllm serve Qwen/Qwen3-30B-A3B -tp 2 --enable-expert-parallel"], "enable_expert_parallel"),
    (SIM + ["--engine-cmd", "vllm serve Qwen/Qwen3-30B-A3B -dp 2 --enable-eplb"], "enable_eplb"),
    (SIM + ["--engine-cmd", "vllm serve Qwen/Qwen3-30B-A3B -dp 2 -ep --enable-dbo"], "--enable-dbo"),
    (SIM + ["--engine-cmd", f"{SGL_DPA} --ep-size 3"], "ep_size"),
    (SIM + ["--engine-cmd", f"{SGL_DPA} --enable-two-batch-overlap"], "enable_two_batch_overlap"),
    (SIM + ["--engine-cmd", f"{SGL_DPA} --moe-a2a-backend deepep --deepep-mode=fast"], "--deepep-mode"),
]
MODEL_FILES = [f for f in FILES if f.startswith("cfg_")]
HW_FILES = [f for f in FILES if f.startswith("hw_")]
CASES += [(["cost", "--q-lens", "16", "--model", "{d}/" + f], f.split(".")[0]) for f in MODEL_FILES]
CASES += [(["stall", "--no-simulate", "--model", "{d}/" + f], f.split(".")[0]) for f in MODEL_FILES]
CASES += [(["cost", "--q-lens", "16", "--hardware", "{d}/" + f], f.split(".")[0]) for f in HW_FILES]
CASES += [(SIM + ["--hardware", "{d}/" + f], f.split(".")[0]) for f in HW_FILES]
CASES += [
    (["simulate", "-f", "{d}/" + f], field)
    for f, field in [
        ("exp_utf8.yaml", "exp_utf8"),
        ("exp_syntax.yaml", "exp_syntax"),
        ("exp_list.yaml", "exp_list"),
        ("exp_unknown.yaml", "polcy"),
        ("exp_engine_unknown.yaml", "max_num_seq"),
        ("exp_engine_bool.yaml", "exp_engine_bool.yaml:engine:max_num_seqs"),
        ("exp_tp.yaml", "tp"),
        ("exp_seed.yaml", "seed"),
        ("exp_policy.yaml", "policy"),
        ("exp_workload.yaml", "workload"),
        ("exp_goodput.yaml", "goodput"),
        ("exp_wl_kind.yaml", "kind"),
        ("missing.yaml", "missing.yaml"),
        ("exp_lengths.yaml", "exp_lengths.yaml:workload:lengths:input_len"),
        ("exp_trace_path.yaml", "exp_trace_path.yaml:workload:trace:path"),
        ("exp_block.yaml", "exp_block.yaml:engine:block_size"),
    ]
]
SWEEP = [
    "sweep",
    "--itl-slo-ms",
    "50",
    "--num-prompts",
    "5",
    "--request-rates",
    "1",
    "--policies",
    "vllm",
    "--max-num-batched-tokens",
    "512",
]
CASES += [
    (["sweep", "--itl-slo-ms", "50", "--config", "{d}/" + f], field)
    for f, field in [
        ("sw_utf8.yaml", "sw_utf8"),
        ("sw_syntax.yaml", "sw_syntax"),
        ("sw_unknown.yaml", "grdi"),
        ("sw_grid_list.yaml", "max_num_batched_tokens"),
        ("sw_grid_str.yaml", "max_num_batched_tokens"),
        ("sw_rates.yaml", "request_rates"),
        ("sw_slo_key.yaml", "itl"),
        ("sw_slo_neg.yaml", "itl_ms"),
        ("sw_tp.yaml", "tp"),
        ("sw_list.yaml", "sw_list"),
        ("missing.yaml", "missing.yaml"),
        ("sw_tp_list.yaml", "tp"),
        ("sw_router.yaml", "router"),
        ("sw_price.yaml", "gpu_hourly_price"),
        ("sw_replicas.yaml", "replicas"),
    ]
]
CASES += [
    (["sweep"], "--itl-slo-ms"),
    (["sweep", "--itl-slo-ms", "0"], "--itl-slo-ms"),
    (["sweep", "--itl-slo-ms", "x"], "--itl-slo-ms"),
    (["sweep", "--itl-slo-ms", "50", "--ttft-slo-ms", "-1"], "--ttft-slo-ms"),
    (["sweep", "--itl-slo-ms", "50", "--percentile", "95"], "--percentile"),
    (["sweep", "--itl-slo-ms", "50", "--objective", "request_goodput"], "--objective"),
    (["sweep", "--itl-slo-ms", "50", "--objective", "latency"], "--objective"),
    (SWEEP + ["--model", "gpt-5"], "model"),
    (SWEEP + ["--hardware", "tpu-v9"], "hardware"),
    (SWEEP + ["--hardware", "{d}/hw_str.yaml"], "hw_str"),
    (SWEEP + ["--out", "{d}/afile"], "--out"),
    (SWEEP + ["--executor", "dask", "--scheduler-address", "tcp://127.0.0.1:9"], "--scheduler-address"),
    (SWEEP + ["--executor", "dask", "--scheduler-address", "nohostport"], "--scheduler-address"),
    (SWEEP + ["--scheduler-address", "tcp://127.0.0.1:9"], "scheduler-address"),
    (SWEEP + ["--resume"], "--resume"),
    (["sweep", "--itl-slo-ms", "50", "--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (["sweep", "--itl-slo-ms", "50", "--request-rates", "0"], "--request-rates"),
    (["sweep", "--itl-slo-ms", "50", "--jobs", "0"], "--jobs"),
    (["sweep", "--itl-slo-ms", "50", "--workload-file", "{d}/sw_utf8.yaml"], "--workload-file"),
    (
        ["sweep", "--itl-slo-ms", "50", "--workload-file", "{d}/sw_wl_lengths.yaml"],
        "sw_wl_lengths.yaml:workload:lengths:input_len",
    ),
    (
        ["sweep", "--itl-slo-ms", "50", "--config", "{d}/sw_wl_lengths.yaml"],
        "sw_wl_lengths.yaml:workload:lengths:input_len",
    ),
    (["sweep", "--itl-slo-ms", "50", "--dataset-name", "hf"], "--dataset-name"),
    (
        ["sweep", "--itl-slo-ms", "50", "--policies", "sglang", "--max-num-batched-tokens", "512"],
        "max-num-batched-tokens",
    ),
    (SWEEP + ["--hardware", "h100", "h100"], "--hardware"),
    (SWEEP + ["--tp", "0"], "--tp"),
    (SWEEP + ["--tp", "16"], "--tp"),
    (SWEEP + ["--replicas", "0"], "--replicas"),
    (SWEEP + ["--router", "random"], "--router"),
    (SWEEP + ["--hardware", "h100", "tpu-v9"], "hardware"),
    (SWEEP + ["--gpu-hourly-price", "0"], "--gpu-hourly-price"),
    (SWEEP + ["--gpu-hourly-price", "cheap"], "--gpu-hourly-price"),
    (SWEEP + ["--gpu-hourly-price", "nan"], "--gpu-hourly-price"),
    (SWEEP + ["--hardware", "h100", "h200", "--gpu-hourly-price", "3"], "--gpu-hourly-price"),
    (SWEEP + ["--gpu-hourly-price", "b200=3"], "--gpu-hourly-price"),
    (SWEEP + ["--hardware", "h200", "--objective", "usd_per_million_output_tokens"], "--gpu-hourly-price"),
    (SIM + ["--gpu-hourly-price", "0"], "--gpu-hourly-price"),
    (SIM + ["--gpu-hourly-price", "inf"], "--gpu-hourly-price"),
    (SIM + ["--time-scale", "2"], "--time-scale"),
    (SIM + ["--time-scale", "0"], "--time-scale"),
    (SIM + ["--target-rate", "-1"], "--target-rate"),
    (
        SIM
        + [
            "--workload-file",
            "{d}/trace_generic.csv",
            "--trace-format",
            "csv",
            "--trace-columns",
            "arrival=t,prompt_len=p,output_len=o",
            "--time-scale",
            "2",
            "--target-rate",
            "3",
        ],
        "--time-scale",
    ),
    (
        SIM
        + [
            "--workload-file",
            "{d}/trace_generic.csv",
            "--trace-format",
            "csv",
            "--trace-columns",
            "arrival=t,prompt_len=p,output_len=o",
            "--target-rate",
            "3",
            "--request-rate",
            "5",
        ],
        "--target-rate",
    ),
    (["list"], "what"),
    (["list", "gpus"], "what"),
    (["cost", "--q-lens", "1,a"], "--q-lens"),
    (["cost", "--q-lens", "1,,2"], "--q-lens"),
    (["cost", "--q-lens", "1000000000000"], "--q-lens"),
    (["cost", "--q-lens", "4", "--kv-lens", "1000000000000"], "--kv-lens"),
    (["cost", "--q-lens", "16,1", "--kv-lens", "0"], "--kv-lens"),
    (["cost", "--q-lens", "0"], "--q-lens"),
    (["cost", "--q-lens", ","], "--q-lens"),
    (["cost", "--q-lens", "4", "--kv-lens", "-1"], "--kv-lens"),
    (["cost"], "--q-lens"),
    (["cost", "--batch-file", "{d}/missing.csv"], "--batch-file"),
    (["cost", "--batch-file", "{d}/batch_utf8.csv"], "--batch-file"),
    (["cost", "--batch-file", "{d}/batch_cols.csv"], "--batch-file"),
    (["cost", "--batch-file", "{d}/batch_val.csv"], "batch_val.csv:2:kv_len"),
    (["cost", "--batch-file", "{d}/batch_empty.csv"], "--batch-file"),
    (["cost", "--batch-file", "{d}"], "--batch-file"),
    (["cost", "--q-lens", "4", "--counting", "exact"], "--counting"),
    (["cost", "--q-lens", "4", "--model", "gpt-5"], "model"),
    (["cost", "--q-lens", "4", "--hardware", "tpu-v9"], "hardware"),
    (["cost", "--q-lens", "4", "--interval"], "covariance"),
    (["stall", "--prompt-len", "0"], "--prompt-len"),
    (["stall", "--num-decodes", "-1"], "--num-decodes"),
    (["stall", "--slo-ms", "0"], "--slo-ms"),
    (["stall", "--align", "0"], "--align"),
    (["stall", "--budget", "x"], "--budget"),
    (["stall", "--decode-context", "0"], "--decode-context"),
    (["stall", "--model", "gpt-5"], "model"),
    (["stall", "--hardware", "tpu-v9"], "hardware"),
    (["stall", "--tp", "0"], "--tp"),
    (["calibrate", "--from", "bogus", "x"], "from"),
    (["calibrate", "--from", "vidur", "{d}/missing"], "missing"),
    (["calibrate", "--from", "vidur", "{d}/missing", "--out", "{d}/afile"], "--out"),
    (["calibrate", "--device", "tpu"], "--device"),
    (["calibrate", "--from", "vidur", "{d}/missing", "--model", "qwen3-8b"], "--model"),
    (["calibrate"], "from"),
    (["calibrate", "--form", "cubic"], "--form"),
    (["bogus"], "VERB"),
    ([], "VERB"),
    (["simulate", "--num", "5"], "--num"),
    (["stall", "--prompt", "5"], "--prompt"),
    (["simulate", "--input", "300"], "--input"),
    (["sweep", "--itl", "50"], "--itl"),
]


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    for name, content in FILES.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


def _argv(argv, d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


def test_table_has_enough_distinct_cases():
    distinct = {tuple(a) for a, _ in CASES}
    assert len(distinct) == len(CASES) >= 150
    verbs = {a[0] for a, _ in CASES if a}
    assert verbs >= {"stall", "cost", "simulate", "sweep", "calibrate"}


@pytest.mark.parametrize("argv,field", CASES, ids=[" ".join(a)[:80] for a, _ in CASES])
def test_bad_input(argv, field, bad_dir, monkeypatch):
    import experiments.cli.simulate_run as sr

    def no_run(*a, **k):
        raise AssertionError("simulated before the input was checked")

    monkeypatch.setattr(sr, "ProgressSimulation", no_run)
    monkeypatch.setattr("experiments.executors.map_points", no_run)
    monkeypatch.chdir(bad_dir)
    assert_one_line_error(_argv(argv, bad_dir), field.replace("{d}", str(bad_dir)))


# ---- Hypothesis: corrupted files either work or fail in one line -------------------------------


def _verdict(argv):
    rc, out, err = run_cli(argv)
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("warning:")]
    assert "Traceback" not in err
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        assert len(lines) == 1, lines
    return rc


def _scalar():
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 10**6),
        st.floats(allow_nan=True),
        st.text(max_size=6),
        st.lists(st.integers(), max_size=2),
    )


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(key=st.sampled_from(sorted(k for k in LLAMA if not k.startswith("_"))), value=_scalar(), drop=st.booleans())
def test_corrupt_config_json(tmp_path_factory, key, value, drop):
    d = {**LLAMA}
    if drop:
        d.pop(key)
    else:
        d[key] = value
    p = tmp_path_factory.mktemp("cfg") / "config.json"
    p.write_text(json.dumps(d))
    _verdict(["cost", "--q-lens", "16,1", "--kv-lens", "0,64", "--model", str(p)])


@SETTINGS
@given(key=st.sampled_from(sorted(k for k in H100 if k != "sources")), value=_scalar())
def test_corrupt_hardware_yaml(tmp_path_factory, key, value):
    p = tmp_path_factory.mktemp("hw") / "hw.yaml"
    p.write_text(yaml.safe_dump({**H100, key: value}))
    _verdict(["cost", "--q-lens", "16,1", "--kv-lens", "0,64", "--hardware", str(p)])


@SETTINGS
@given(data=st.binary(max_size=200))
def test_garbage_hardware_yaml(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("hwb") / "hw.yaml"
    p.write_bytes(data)
    _verdict(["cost", "--q-lens", "16", "--hardware", str(p)])


EXP = {
    "policy": "vllm",
    "tp": 1,
    "seed": 0,
    "replicas": 1,
    "engine": {"max_num_batched_tokens": 512, "max_num_seqs": 8},
    "workload": {
        "kind": "poisson",
        "request_rate": 50,
        "num_prompts": 4,
        "lengths": {"kind": "fixed", "input_len": 64, "output_len": 4},
    },
}


def _paths(d, prefix=()):
    for k, v in d.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


def _set(d, path, value):
    d = json.loads(json.dumps(d))
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


@SETTINGS
@given(path=st.sampled_from(list(_paths(EXP))), value=_scalar())
def test_corrupt_experiment_yaml(tmp_path_factory, path, value):
    p = tmp_path_factory.mktemp("exp") / "exp.yaml"
    p.write_text(yaml.safe_dump(_set(EXP, path, value)))
    _verdict(["simulate", "-f", str(p), "--quiet", "--json"])


SWEEP_CFG = {
    "model": "llama-3.1-8b",
    "hardware": "h100",
    "tp": 1,
    "seed": 0,
    "grid": {"vllm": {"max_num_batched_tokens": [512]}},
    "request_rates": [20],
    "workload": {"kind": "poisson", "num_prompts": 4, "lengths": {"kind": "fixed", "input_len": 64, "output_len": 4}},
    "slo": {"itl_ms": 50, "percentile": 99},
}


@SETTINGS
@given(path=st.sampled_from(list(_paths(SWEEP_CFG))), value=_scalar())
def test_corrupt_sweep_yaml(tmp_path_factory, path, value):
    p = tmp_path_factory.mktemp("sw") / "sweep.yaml"
    p.write_text(yaml.safe_dump(_set(SWEEP_CFG, path, value)))
    rc, out, err = run_cli(["sweep", "--config", str(p), "--no-progress", "--json"])
    assert "Traceback" not in err
    assert rc in (0, 1, 2), (rc, err)
    if rc == 2:
        assert len([l for l in err.splitlines() if l.strip()]) == 1, err


@SETTINGS
@given(cut=st.integers(0, 3000), junk=st.binary(max_size=20), where=st.integers(0, 3000))
def test_corrupt_trace(tmp_path_factory, cut, junk, where):
    raw = MOONCAKE.read_bytes()[:cut]
    raw = raw[:where] + junk + raw[where:]
    p = tmp_path_factory.mktemp("tr") / "trace.jsonl"
    p.write_bytes(raw)
    _verdict(["simulate", "--workload-file", str(p), "--quiet", "--json", "--max-model-len", "200000"])


AZURE = ROOT / "workloads" / "fixtures" / "azure_conv_120.csv"


@SETTINGS
@given(cut=st.integers(0, 6000), junk=st.binary(max_size=20), where=st.integers(0, 6000))
def test_corrupt_csv_trace(tmp_path_factory, cut, junk, where):
    raw = AZURE.read_bytes()[:cut]
    raw = raw[:where] + junk + raw[where:]
    p = tmp_path_factory.mktemp("az") / "trace.csv"
    p.write_bytes(raw)
    _verdict(["simulate", "--workload-file", str(p), "--quiet", "--json"])


def test_absurd_replica_count_is_one_clear_error(tmp_path):
    """A mistyped replica count fails at once in one line instead of building 10**6 engines."""
    from experiments.engines import MAX_REPLICAS

    p = tmp_path / "exp.yaml"
    for n, want in ((MAX_REPLICAS + 1, 2), (10**6, 2), (3, 0)):
        p.write_text(yaml.safe_dump(_set(EXP, ("replicas",), n)))
        assert _verdict(["simulate", "-f", str(p), "--quiet", "--json"]) == want
