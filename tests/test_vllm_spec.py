"""Speculative decoding under chunksim's vLLM policy (policies/vllm_spec.py): flags, refusals,
acceptance draws, what a step schedules and emits, the reference loop, the direction of the change."""

from __future__ import annotations

import math

import pytest

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from experiments.engine_cmd import parse_engine_cmd
from experiments.engines import build_engine
from policies.vllm import VLLMConfig
from policies.vllm_spec import DEFAULT_ACCEPTANCE, SpecDecode, parse_speculative_config
from simcore.simulation import Simulation
from simcore.stepping import SteppingReplica
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
EAGLE3 = '{"method": "eagle3", "num_speculative_tokens": 3}'


def _run(
    spec: str | None,
    alpha: float = DEFAULT_ACCEPTANCE,
    n: int = 8,
    out: int = 64,
    seed: int = 0,
    async_scheduling: bool = False,
):
    flags: dict = {"max_num_batched_tokens": 2048}
    if spec:
        flags.update(speculative_config=spec, spec_acceptance=alpha, spec_seed=seed, async_scheduling=async_scheduling)
    pol, pool, cm, ml = build_engine("vllm", MODEL, HW, flags=flags)
    wl = Workload([0.0] * n, [100] * n, [out] * n)
    sim = Simulation([(pol, pool, cm)], wl, check=True, max_model_len=ml, record_iterations=True)
    return sim.run(), sim


def test_speculative_config_parses_as_vllm_spells_it():
    s = parse_speculative_config(
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}'
    )
    assert (s.method, s.k, s.lookahead, s.acceptance) == ("eagle3", 5, 5, DEFAULT_ACCEPTANCE)
    s = parse_speculative_config('{"model": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_max": 4}')
    assert (s.method, s.k, s.lookahead) == ("ngram", 2, 0)
    assert parse_speculative_config("") is None
    cmd = parse_engine_cmd(
        f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{EAGLE3}' --no-async-scheduling"
    )
    assert cmd.flags == {"speculative_config": EAGLE3, "async_scheduling": False} and not cmd.ignored


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"method": "draft_model", "num_speculative_tokens": 3}', "not modelled"),
        ('{"method": "suffix", "num_speculative_tokens": 3}', "not modelled"),
        ('{"model": "some/draft", "num_speculative_tokens": 3}', "draft_model"),
        ('{"method": "ngram"}', "num_speculative_tokens"),
        ('{"method": "eagle", "num_speculative_tokens": 0}', "positive"),
        ('{"method": "eagle3", "num_speculative_tokens": 3, "parallel_drafting": true}', "parallel drafting"),
        ('{"method": "eagle", "num_speculative_tokens": 3, "nonsense": 1}', "does not model"),
        ("not json", "JSON"),
    ],
)
def test_unmodelled_speculative_configs_are_refused(text, says):
    with pytest.raises(InputError, match=says):
        parse_speculative_config(text)
    with pytest.raises(InputError):
        parse_engine_cmd(f"vllm serve m --speculative-config '{text}'")


def test_async_scheduling_with_drafts_resolves_as_vllm_on_a_gpu():
    ngram = '{"method": "ngram", "num_speculative_tokens": 3}'
    for text in (ngram, EAGLE3, ""):  # Model Runner V2 (the GPU default) runs every method async
        assert VLLMConfig(speculative_config=text).async_scheduling is True
        assert VLLMConfig(speculative_config=text, async_scheduling=False).async_scheduling is False
    assert _policy(EAGLE3, None).defers_output and not _policy(EAGLE3, False).defers_output
    assert not _policy("", None).defers_output


def _policy(spec: str, async_scheduling):
    flags = {"speculative_config": spec, "async_scheduling": async_scheduling} if spec else {}
    return build_engine("vllm", MODEL, HW, flags=flags)[0]


def test_async_drafts_lag_one_step_and_cost_a_wasted_step_only_at_the_end():
    """Async: schedule(n+1) counts step n's drafts as accepted; with α = 1 nothing rolls back, so the
    steps are the sync run's; with α = 0 a request whose last token can only come from an accepted
    draft is never scheduled past it (the skip), so the step counts match too; at α = 1 the request
    that finishes by accepted drafts is scheduled once more (a dropped step, as vLLM runs it)."""
    for alpha in (0.0, 1.0):
        sync, s_sim = _run(EAGLE3, alpha=alpha, out=20)
        lag, a_sim = _run(EAGLE3, alpha=alpha, out=20, async_scheduling=True)
        assert all(r.num_output_tokens == 20 for r in a_sim.requests)
        extra = 0 if alpha == 0 else 1  # (20 - 1) tokens at 4 a step end on a step the skip cannot foresee
        assert len(lag.iterations) == len(sync.iterations) + extra
        assert [r.finish_s for r in a_sim.requests] == [r.finish_s for r in s_sim.requests]


def test_sglang_speculative_algorithms_not_modelled_are_refused():
    with pytest.raises(InputError, match="not modelled"):
        parse_engine_cmd("python -m sglang.launch_server --model-path m --speculative-algorithm NGRAM")


def test_cli_refuses_an_unmodelled_method_with_exit_2(capsys):
    from experiments.cli import main

    rc = main(["simulate", "--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 2}'])
    assert rc == 2
    assert "not modelled" in capsys.readouterr().err


def test_acceptance_draws_are_reproducible_and_have_the_modelled_mean():
    s = SpecDecode("eagle", 4, 0.6, seed=7)
    draws = [s.accepted(r, d, 4) for r in range(50) for d in range(40)]
    assert draws == [SpecDecode("eagle", 4, 0.6, seed=7).accepted(r, d, 4) for r in range(50) for d in range(40)]
    assert draws != [SpecDecode("eagle", 4, 0.6, seed=8).accepted(r, d, 4) for r in range(50) for d in range(40)]
    want = sum(0.6**j for j in range(1, 5))  # E[a] = Σ_j P(a >= j) = Σ α^j
    many = [s.accepted(r, d, 4) for r in range(200) for d in range(100)]
    assert abs(sum(many) / len(many) - want) < 0.03  # σ of the mean ≈ 0.009
    assert {SpecDecode("eagle", 4, 0.0).accepted(1, d, 4) for d in range(20)} == {0}
    assert {SpecDecode("eagle", 4, 1.0).accepted(1, d, 3) for d in range(20)} == {3}
    a, _ = _run(EAGLE3, seed=3)
    b, _ = _run(EAGLE3, seed=3)
    assert [(s, e) for _, s, e, _, _ in a.iterations] == [(s, e) for _, s, e, _, _ in b.iterations]


def test_alpha_zero_schedules_1_plus_k_but_emits_one_token_per_step():
    res, sim = _run(EAGLE3, alpha=0.0, out=20)
    decode_steps = res.iterations[1:]
    assert all(n == 4 for *_, plan in decode_steps for _, n in plan.items)
    assert len(decode_steps) == 19  # one token per step after the prefill's
    assert all(r.num_output_tokens == 20 for r in sim.requests)


def test_alpha_one_emits_k_plus_one_per_step_until_max_tokens():
    res, sim = _run(EAGLE3, alpha=1.0, out=20)
    assert len(res.iterations) == 1 + -(-19 // 4)  # the prefill's token, then 4 a step (the last trimmed)
    assert all(r.num_output_tokens == 20 and r.num_computed_tokens == 100 + 19 for r in sim.requests)


def test_spec_decoding_runs_the_reference_loop():
    _, sim = _run(EAGLE3)
    assert all(isinstance(r, SteppingReplica) for r in sim.replicas)


def test_a_decode_heavy_workload_gets_faster_and_tpot_falls():
    base, _ = _run(None, n=16, out=256)
    spec, _ = _run(EAGLE3, n=16, out=256)
    bad, _ = _run(EAGLE3, alpha=0.0, n=16, out=256)
    b, s, z = base.summary, spec.summary, bad.summary
    assert s["output_throughput"] > 1.3 * b["output_throughput"]
    assert s["mean_tpot_ms"] < b["mean_tpot_ms"]
    assert z["output_throughput"] < b["output_throughput"]  # drafts all rejected: verify + draft cost for nothing
    assert s["mean_itl_ms"] > b["mean_itl_ms"]  # a chunk of tokens per step: each step is a bit longer


def test_ngram_drafter_is_free_and_eagle_drafter_costs_a_layer_and_its_lm_head():
    from costmodel.speculative import with_drafter

    _, pool, cm, _ = build_engine("vllm", MODEL, HW)
    assert with_drafter(cm, "ngram", 3) is cm
    for n, k in ((8, 3), (1, 5), (32, 1)):
        q, kv = [k + 1] * n, [500] * n
        lm = cm.breakdown(cm.shape([1] * n, [1] * n)).op("lm_head").time_s  # n rows of the target's head
        layers = (cm.step_time(q, kv) + (k - 1) * cm.step_time([1] * n, [501 + k] * n)) / MODEL.L
        for method, vocab in (("eagle", MODEL.vocab), ("mtp", MODEL.vocab), ("eagle3", 32000)):
            d = with_drafter(cm, method, k)
            extra = d.step_time(q, kv) - cm.step_time(q, kv)
            assert extra == pytest.approx(layers + k * (vocab / MODEL.vocab - 1 / MODEL.L) * lm)
    assert with_drafter(cm, "eagle3", 3).draft_time(q, kv) < with_drafter(cm, "eagle", 3).draft_time(q, kv)


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("alpha, k", [(0.3, 1), (0.5, 2), (0.65, 3), (0.8, 4), (0.9, 5), (0.95, 2)])
def test_mean_tokens_per_verify_step_is_the_truncated_geometric_sum(alpha, k, async_scheduling):
    """A verify step of k drafts emits 1 + a tokens, P(a >= j) = α^j, so its mean is
    τ = (1 − α^(k+1)) / (1 − α). Counted over a whole run: every token after the prefill's comes
    from a verify step that the request's output still used. Tolerance: 4 standard errors of the
    mean (σ from the same distribution) plus the tokens the last step of each request may trim (≤ k)."""
    n, out = 8, 1200
    res, sim = _run(
        f'{{"method": "eagle", "num_speculative_tokens": {k}}}',
        alpha,
        n,
        out,
        seed=k,
        async_scheduling=async_scheduling,
    )
    steps = sum(
        1
        for _, start, _, _, plan in res.iterations
        for r, _ in plan.items
        if plan.spec.get(r, 0) > 0 and start < r.finish_s
    )
    tokens = sum(r.num_output_tokens - 1 for r in sim.requests)
    p = [alpha**j * (1 - alpha) for j in range(k)] + [alpha**k]  # P(1 + a = 1 + j), j = 0..k
    tau = sum((1 + j) * q for j, q in enumerate(p))
    sigma = math.sqrt(sum((1 + j - tau) ** 2 * q for j, q in enumerate(p)))
    assert tau == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))
    assert abs(tokens / steps - tau) <= 4 * sigma / math.sqrt(steps) + k * n / steps, (tokens / steps, tau, steps)
