"""What one forward pass costs: model shapes, hardware profiles, the roofline, calibration."""

from .errors import InputError
from .hardware import Hardware, known_hardware, load_hardware
from .model import ModelSpec, known_models, load_model, model_from_config
from .roofline import Breakdown, CostModel, Operator, cost
from .shape import ShapeStats

__all__ = [
    "InputError",
    "Hardware",
    "known_hardware",
    "load_hardware",
    "ModelSpec",
    "known_models",
    "load_model",
    "model_from_config",
    "Breakdown",
    "CostModel",
    "Operator",
    "ShapeStats",
    "cost",
]
