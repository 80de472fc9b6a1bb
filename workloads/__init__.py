"""Who arrives when with how many tokens: generators and trace loaders.

``Workload`` is what the simulator consumes. Builders take an explicit ``numpy.random.Generator``
per stream; ``workload_from_config`` is the YAML/dict front door that derives them from one seed.
"""

from pathlib import Path

from . import arrivals, lengths, traces
from .config import workload_from_config
from .lengths import Lengths
from .traces import azure, load_trace, mooncake
from .workload import Workload

FIXTURES = Path(__file__).parent / "fixtures"

__all__ = [
    "Workload",
    "Lengths",
    "arrivals",
    "lengths",
    "traces",
    "load_trace",
    "azure",
    "mooncake",
    "workload_from_config",
    "FIXTURES",
]
