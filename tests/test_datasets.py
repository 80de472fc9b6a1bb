"""`--dataset-name sharegpt` samples what `vllm bench serve` samples: first turns, vLLM's filter."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.errors import InputError
from experiments import datasets
from workloads import lengths
from workloads.config import workload_from_config

FIXTURES = Path(__file__).resolve().parents[1] / "workloads" / "fixtures"


def test_sharegpt_is_first_turns_a_few_hundred_tokens_each_way():
    L = lengths.sharegpt(20000, np.random.default_rng(1))
    # the shipped table after vLLM's filter: 221 in, 199 out on average (workloads/fixtures/README.md)
    assert 200 < L.prompt_len.mean() < 245 and 180 < L.output_len.mean() < 220
    assert L.prompt_len.min() >= 4 and L.output_len.min() >= 4
    assert L.prompt_len.max() <= 1024 and (L.prompt_len + L.output_len).max() <= 2048
    # the old 200-row table (whole conversations up to 8k) is ~2,000 in / ~500 out: not this
    old = pd.read_csv(FIXTURES / "sharegpt_8k_filtered_200.csv")
    assert old.num_prefill_tokens.mean() > 5 * L.prompt_len.mean()


def test_sharegpt_filter_is_vllms_is_valid_sequence():
    p = np.array([3, 4, 1024, 1025, 1000, 500, 10])
    o = np.array([10, 4, 1024, 5, 1049, 3, 3])
    assert lengths.vllm_valid(p, o, False).tolist() == [False, True, True, False, False, False, False]
    # --sharegpt-output-len skips the output >= 4 check, not the total
    assert lengths.vllm_valid(p, o, True).tolist() == [False, True, True, False, False, True, True]


def test_sharegpt_output_len_replaces_before_the_filter(tmp_path):
    t = tmp_path / "t.csv"
    pd.DataFrame({"prompt_len": [100, 1000, 2], "output_len": [2, 50, 50]}).to_csv(t, index=False)
    L = lengths.sharegpt(200, np.random.default_rng(0), t)
    assert set(L.prompt_len.tolist()) == {1000}  # 100 has output 2 < 4; 2 is too short
    L = lengths.sharegpt(200, np.random.default_rng(0), t, output_len=1500)
    assert set(L.prompt_len.tolist()) == {100} and (L.output_len == 1500).all()  # 1000 + 1500 > 2048
    with pytest.raises(InputError, match="no row passes"):
        lengths.sharegpt(5, np.random.default_rng(0), t, output_len=2047)


def test_dataset_flags_make_a_sharegpt_section(tmp_path):
    w = datasets.apply({"kind": "poisson", "request_rate": 1.0}, {"dataset_name": "sharegpt"})
    assert w["lengths"] == {"kind": "sharegpt"}
    t = tmp_path / "first.csv"
    pd.DataFrame({"prompt_len": [300], "output_len": [200]}).to_csv(t, index=False)
    w = datasets.apply(
        {"kind": "poisson", "request_rate": 1.0, "num_prompts": 5}, {"dataset_name": "sharegpt", "dataset_path": str(t)}
    )
    wl = workload_from_config(w, 0)
    assert (np.asarray(wl.prompt_len) == 300).all() and (np.asarray(wl.output_len) == 200).all()
