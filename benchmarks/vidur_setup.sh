#!/usr/bin/env bash
# Makes a venv of Vidur's own (microsoft/vidur at the pinned commit below) for
# `benchmarks/bench_vidur_workload.py --vidur VENV/bin/python`, as the conformance engines get
# venvs of their own: Vidur is never a dependency of chunksim.
#
#   benchmarks/vidur_setup.sh SRC [VENV]
#
# SRC: a git repository of microsoft/vidur holding commit $VIDUR_COMMIT (a clone, or a bare
#      git directory); only its `vidur/` package, setup.py, requirements.txt and LICENSE are
#      taken (`git archive`), so a clone without its Git LFS profiling data will do.
# VENV: where to make the venv (default ../venvs/vidur, beside the repository).
#
# Vidur's `vidur/` has no __init__.py, so `pip install` of its setup.py installs no package; the
# source is unpacked into VENV/src/vidur-<commit> and put on the venv's path with a .pth file
# (the PROVENANCE of ../shared/data/kernels says Vidur was run from its source on PYTHONPATH).
# Its requirements come from benchmarks/vidur_requirements.txt (Vidur's own list, pinned).
# About 2 minutes on the 2-core box from the local package mirror.
set -euo pipefail

VIDUR_COMMIT=7d47513363ec447a741ac5e47241580b47724fbf   # keep in step with bench_vidur_workload.py
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="${1:?usage: $0 SRC [VENV]  (SRC: a git repository of microsoft/vidur with commit $VIDUR_COMMIT)}"
VENV="${2:-$HERE/../../venvs/vidur}"
PY="${PYTHON:-python3}"

git -C "$SRC" cat-file -e "$VIDUR_COMMIT^{commit}" 2>/dev/null \
  || { echo "$SRC has no commit $VIDUR_COMMIT (microsoft/vidur)" >&2; exit 1; }
"$PY" -m venv "$VENV"
DEST="$VENV/src/vidur-${VIDUR_COMMIT:0:7}"
rm -rf "$DEST" && mkdir -p "$DEST"
# A tree walk may complain of LFS blobs missing under data/; the paths taken are all present.
git -C "$SRC" archive "$VIDUR_COMMIT" -- vidur setup.py requirements.txt LICENSE | tar -x -C "$DEST"
"$VENV/bin/pip" install -q -r "$HERE/vidur_requirements.txt"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
(cd "$DEST" && pwd) > "$SITE/vidur_src.pth"
echo "$VIDUR_COMMIT" > "$VENV/vidur-commit"
"$VENV/bin/python" -c 'import vidur.simulator, vidur.config; print("vidur from", list(vidur.__path__)[0])'
echo "Vidur $VIDUR_COMMIT in $VENV; run: python benchmarks/bench_vidur_workload.py --vidur $VENV/bin/python"
