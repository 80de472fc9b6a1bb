"""Calibration: fit the roofline's constants to measured kernel timings and carry their uncertainty.

timings     the tidy timing table and its importers (Vidur CSVs, our microbenchmark)
fit         least-squares fit per operator class, 1σ from the Jacobian, identifiability warnings
microbench  one measurement plan, run with numpy (cpu) or torch (cuda)
profile     fit → hardware YAML profile, and back
predict     parameter draws → Hardware profiles; a prediction interval on a forward pass
"""

from .fit import Fit, fit
from .predict import forward_interval, sample_hardware
from .profile import profile_from_fit
from .timings import load_timings

__all__ = ["Fit", "fit", "forward_interval", "sample_hardware", "profile_from_fit", "load_timings"]
