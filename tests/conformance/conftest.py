"""The conformance tests drive the engines' own schedulers: they skip, saying why, where those are
not installed (see docs/conformance.md)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
