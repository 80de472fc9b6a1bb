"""Trace replay (Azure, Mooncake, generic CSV/JSONL) and the errors bad trace files produce."""

import json
from pathlib import Path

import numpy as np
import pytest

from costmodel.errors import InputError
from workloads import FIXTURES, azure, load_trace, mooncake, workload_from_config

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces"
AZURE, MOONCAKE = FIXTURES / "azure_conv_120.csv", FIXTURES / "mooncake_conv_30.jsonl"


def test_azure_fixture():
    w = azure(AZURE)
    assert len(w) == 120 and w.arrival_s[0] == 0 and w.block_hashes is None and w.notes == ()
    assert w.arrival_s[1] == pytest.approx(50.9951690 - 46.6805900)  # 7-digit fractions kept
    assert w.arrival_s[-1] == pytest.approx(32.1833420 - 46.6805900 + 60)
    assert (w.prompt_len[0], w.output_len[0]) == (374, 44)
    assert (w.prompt_len[-1], w.output_len[-1]) == (1157, 426)


def test_mooncake_fixture_with_hash_ids():
    w = mooncake(MOONCAKE)
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    assert len(w) == 30 and w.block_tokens == 512
    np.testing.assert_array_equal(w.arrival_s, [r["timestamp"] / 1000 for r in rows])
    assert w.block_hashes == [tuple(r["hash_ids"]) for r in rows]
    assert w.block_hashes[1][0] == w.block_hashes[0][0] == 0


def test_window_max_requests_and_scaling():
    full = mooncake(MOONCAKE)
    w = mooncake(MOONCAKE, start_s=3.0, end_s=9.0)
    keep = (full.arrival_s >= 3) & (full.arrival_s < 9)
    np.testing.assert_allclose(w.arrival_s, full.arrival_s[keep] - 3.0)
    assert w.block_hashes == [h for h, k in zip(full.block_hashes, keep) if k]
    assert len(mooncake(MOONCAKE, max_requests=7)) == 7
    np.testing.assert_allclose(azure(AZURE, time_scale=0.5).arrival_s, azure(AZURE).arrival_s * 0.5)
    w = azure(AZURE, target_rate=10.0)
    assert (len(w) - 1) / (w.arrival_s[-1] - w.arrival_s[0]) == pytest.approx(10.0)
    assert "scaled" in w.notes[0]
    with pytest.raises(InputError, match="not both"):
        azure(AZURE, time_scale=2, target_rate=3)
    with pytest.raises(InputError, match="no requests in the window"):
        azure(AZURE, start_s=1000)


def test_mooncake_group_spreading_is_seeded_and_stays_in_its_group():
    base = mooncake(MOONCAKE)
    a = mooncake(MOONCAKE, spread_s=3.0, rng=np.random.default_rng(1))
    b = mooncake(MOONCAKE, spread_s=3.0, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert np.all(a.arrival_s >= base.arrival_s) and np.all(a.arrival_s < base.arrival_s + 3.0)
    assert a.block_hashes == base.block_hashes and len(np.unique(a.arrival_s)) == 30
    assert "spread 30 arrivals in 4 timestamp groups" in a.notes[0]
    with pytest.raises(InputError, match="rng"):
        mooncake(MOONCAKE, spread_s=3.0)


def test_generic_csv_and_jsonl_with_mapping(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("t_ms,in,out,user\n250,10,2,a\n0,20,3,b\n1000,30,4,c\n")
    w = load_trace(p, "csv", columns={"arrival": "t_ms", "prompt_len": "in", "output_len": "out"}, time_unit="ms")
    np.testing.assert_allclose(w.arrival_s, [0, 0.25, 1.0])
    np.testing.assert_array_equal(w.prompt_len, [20, 10, 30])  # rows follow the sort
    assert w.notes == ("t.csv: sorted 1 out-of-order timestamps",)
    q = tmp_path / "t.jsonl"
    q.write_text('{"at": 1.5, "p": 8, "o": 1, "blocks": [4, 5]}\n\n{"at": 0.5, "p": 9, "o": 2, "blocks": [4]}\n')
    w = load_trace(
        q, "jsonl", columns={"arrival": "at", "prompt_len": "p", "output_len": "o", "block_hashes": "blocks"}
    )
    assert w.block_hashes == [(4,), (4, 5)] and "sorted 1" in w.notes[0]


def test_trace_through_config():
    w = workload_from_config(
        {
            "kind": "trace",
            "max_concurrency": 8,
            "trace": {"format": "mooncake", "path": "mooncake_conv_30.jsonl", "end_s": 3, "spread_s": 3.0},
        },
        0,
        base_dir=FIXTURES,
    )
    assert len(w) == 10 and w.closed_loop_concurrency == 8 and w.notes
    again = workload_from_config(
        {
            "kind": "trace",
            "max_concurrency": 8,
            "trace": {"format": "mooncake", "path": "mooncake_conv_30.jsonl", "end_s": 3, "spread_s": 3.0},
        },
        0,
        base_dir=FIXTURES,
    )
    np.testing.assert_array_equal(w.arrival_s, again.arrival_s)


MOON_OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(
    "bad_line, match",
    [
        ('{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]', r":3=.*not valid JSON"),
        ('{"timestamp": 10, "output_length": 5, "hash_ids": [1, 2]}', r":3:input_length.*missing field"),
        ('{"timestamp": 10, "input_length": 0, "output_length": 5, "hash_ids": []}', r":3:input_length=0.*> 0"),
        ('{"timestamp": 10, "input_length": 600, "output_length": -4, "hash_ids": [1, 2]}', r":3:output_length=-4"),
        (
            '{"timestamp": 10, "input_length": "600", "output_length": 5, "hash_ids": [1, 2]}',
            r":3:input_length.*integer",
        ),
        ('{"timestamp": 10, "input_length": 60.5, "output_length": 5, "hash_ids": [1]}', r":3:input_length=60.5"),
        ('{"timestamp": "soon", "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}', r":3:timestamp"),
        ('{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}', r":3:hash_ids"),
        ('{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}', r":3:hash_ids=3.*ceil"),
        ("[1, 2, 3]", r":3=.*not a JSON object"),
    ],
)
def test_malformed_jsonl_line_names_file_line_and_field(tmp_path, bad_line, match):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join([MOON_OK, "", bad_line, MOON_OK]) + "\n")  # line 2 is blank
    with pytest.raises(InputError, match=f"m.jsonl{match}"):
        mooncake(p)


@pytest.mark.parametrize(
    "body, match",
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,5\n", r":1=\['GeneratedTokens'\]: missing columns"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,3\n2023-11-16 18:15:47,0,3\n",
            r":3:ContextTokens=0",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,3\nyesterday,5,3\n",
            r":3:TIMESTAMP='yesterday'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,3\n2023-11-16 18:15:47,5,many\n",
            r":3:GeneratedTokens='many'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,3\n2023-11-16 18:15:47,5,3,9\n",
            "Expected 3 fields in line 3",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "empty trace"),
        ("", "empty file"),
    ],
)
def test_bad_azure_csv(tmp_path, body, match):
    p = tmp_path / "a.csv"
    p.write_text(body)
    with pytest.raises(InputError, match=match):
        azure(p)


def test_empty_jsonl_and_missing_file(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="empty trace"):
        mooncake(tmp_path / "e.jsonl")
    with pytest.raises(InputError, match="no such file"):
        azure(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="trace:columns"):
        load_trace(tmp_path / "e.jsonl", "jsonl", columns={"arrival": "t"})


def test_unsorted_azure_rows_are_sorted_and_noted(tmp_path):
    lines = AZURE.read_text().splitlines()
    p = tmp_path / "shuffled.csv"
    p.write_text("\n".join([lines[0], lines[3], lines[1], lines[2]] + lines[4:]) + "\n")
    w = azure(p)
    np.testing.assert_array_equal(w.arrival_s, azure(AZURE).arrival_s)
    assert w.notes == ("shuffled.csv: sorted 1 out-of-order timestamps",)


needs_traces = pytest.mark.skipif(not (TRACES / "azure2023_conv.csv").exists(), reason="../shared/data absent")


@needs_traces
def test_full_azure_conv_loads_whole():
    w = azure(TRACES / "azure2023_conv.csv")
    assert len(w) == 19_366 and w.duration_s == pytest.approx(3501.7, abs=0.1)
    assert w.notes == ()


@needs_traces
def test_full_mooncake_loads_whole_with_hash_ids():
    w = mooncake(TRACES / "mooncake_conversation.jsonl")
    assert len(w) == 12_031 and w.duration_s == pytest.approx(3537.0)
    assert max(map(len, w.block_hashes)) == 247 and max(max(h) for h in w.block_hashes) == 182_789
