"""Runs Vidur's own simulator (microsoft/vidur, `vidur.simulator.Simulator`) once on the speed
workload and prints one JSON line with how long its event loop took. Run by
`bench_vidur_workload.py --vidur PYTHON` under the Python of Vidur's venv (made by
`benchmarks/vidur_setup.sh`); it imports nothing of chunksim, and chunksim nothing of Vidur.

    PYTHON benchmarks/vidur_driver.py --trace TRACE.csv --kernels DIR --workdir DIR [--train-only]
                                      [VIDUR_FLAG ...]

The configuration is Vidur's CLI (`SimulationConfig.create_from_cli_args`, as `python -m
vidur.main` builds it) with: CodeLlama-34B-Instruct on one `a100` replica, tp 2, network
`a100_pairwise_nvlink`; the `sarathi` replica scheduler with chunk 512, batch cap 128, block 16;
the `trace_replay` request generator reading TRACE (the shared 10,000-request stream, which is
what Vidur's synthetic generator makes at seed 42, so the two simulators see the same requests);
the random-forest predictor with one grid point (250 estimators, depth 16, min split 2) trained
on the profiling tables under DIR (Vidur's `data/profiling` layout of
`../shared/data/kernels/vidur/`: the A100 CodeLlama-34B `mlp.csv`, the `acb95f6` A100 attention
table, the A100 pairwise-NVLink all-reduce table). Vidur caches the trained predictor under
`WORKDIR/cache`, so only the first run trains it. Vidur's Chrome trace is off: it is on by
default and Vidur builds it inside its event loop, a debugging artifact chunksim has no
counterpart of, which took about a seventh of Vidur's loop here (CPU 516 against 603 req/s), so
the ratio to chunksim is quoted against the faster Vidur. Everything else is Vidur's default,
its metrics collection inside the loop included; the metrics and plots that Vidur writes at exit
(after the loop) are skipped. Any further VIDUR_FLAGs are Vidur's own CLI flags, added after
these (so they override them): `--metrics_config_enable_chrome_trace` brings the trace back.

Timed: `Simulator.run()` alone (its event loop), with `time.perf_counter` and
`time.process_time`; Vidur's import, predictor training or loading, request generation and
event-queue set-up (all in `Simulator.__init__`) are timed apart as `setup_s`. The JSON line also
carries how many requests Vidur completed and its simulated end time and mean E2E latency, so
the caller can check that it really simulated them.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time

MODEL = "codellama/CodeLlama-34b-Instruct-hf"


def vidur_argv(trace: str, kernels: str, workdir: str) -> list[str]:
    """Vidur's own command line for the speed workload (the flags `python -m vidur.main` takes)."""
    rf = "--random_forrest_execution_time_predictor_config_"
    return [
        "--seed",
        "42",
        "--log_level",
        "warning",
        "--cluster_config_num_replicas",
        "1",
        "--replica_config_model_name",
        MODEL,
        "--replica_config_device",
        "a100",
        "--replica_config_network_device",
        "a100_pairwise_nvlink",
        "--replica_config_tensor_parallel_size",
        "2",
        "--replica_config_num_pipeline_stages",
        "1",
        "--replica_scheduler_config_type",
        "sarathi",
        "--sarathi_scheduler_config_chunk_size",
        "512",
        "--sarathi_scheduler_config_batch_size_cap",
        "128",
        "--sarathi_scheduler_config_block_size",
        "16",
        "--request_generator_config_type",
        "trace_replay",
        "--trace_request_generator_config_trace_file",
        trace,
        "--trace_request_generator_config_max_tokens",
        "4096",
        "--execution_time_predictor_config_type",
        "random_forrest",
        rf + "compute_input_file",
        os.path.join(kernels, "compute/a100/codellama/CodeLlama-34b-Instruct-hf/mlp.csv"),
        rf + "attention_input_file",
        os.path.join(kernels, "legacy_acb95f6/a100/attention.csv"),
        rf + "all_reduce_input_file",
        os.path.join(kernels, "network/a100_pairwise_nvlink/all_reduce.csv"),
        rf + "num_estimators",
        "250",
        rf + "max_depth",
        "16",
        rf + "min_samples_split",
        "2",
        "--no-metrics_config_enable_chrome_trace",  # on by default; the docstring says why off
        "--metrics_config_output_dir",
        os.path.join(workdir, "simulator_output"),
        "--metrics_config_cache_dir",
        os.path.join(workdir, "cache"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--kernels", required=True, help="Vidur's profiling tables (../shared/data/kernels/vidur)")
    ap.add_argument("--workdir", required=True, help="Vidur's predictor cache and output folder")
    ap.add_argument(
        "--train-only",
        action="store_true",
        help="build the simulator (training its predictor "
        "into the cache when it is not there yet) and stop before the loop",
    )
    args, extra = ap.parse_known_args()
    os.makedirs(args.workdir, exist_ok=True)
    t0 = time.perf_counter()
    from vidur.config import SimulationConfig
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    sys.argv = [
        sys.argv[0],
        *vidur_argv(os.path.abspath(args.trace), os.path.abspath(args.kernels), os.path.abspath(args.workdir)),
        *extra,
    ]
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)  # as vidur.main does
    sim = Simulator(config)
    atexit.unregister(sim._write_output)  # plots and metric files after the loop: not timed, not needed
    requests = [event._request for _, event in sim._event_queue]
    setup = time.perf_counter() - t0
    out = {"requests": len(requests), "setup_s": setup}
    if not args.train_only:
        w0, c0 = time.perf_counter(), time.process_time()
        sim.run()
        out["loop_wall_s"], out["loop_cpu_s"] = time.perf_counter() - w0, time.process_time() - c0
        done = [r for r in requests if r.completed]
        out["completed"] = len(done)
        out["sim_end_s"] = max((r.completed_at for r in done), default=0.0)
        out["mean_e2e_s"] = sum(r.completed_at - r.arrived_at for r in done) / max(1, len(done))
    print("VIDUR_RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
