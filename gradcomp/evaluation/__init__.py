"""Evaluation: model profiles, the end-to-end performance model, what-if analyses and advice.

The functions live in their modules (`profiles`, `measure`, `model`, `whatif`, `advise`, ...);
the names below are re-exported for convenience (none shadows a module).
"""
from .measure import measure_profile
from .model import DDP, Horovod, MethodCost, Network, Prediction, predict
from .profiles import Profile, builtin_profiles, load_profile, save_profile
from .units import format_rate, parse_rate
from .whatif import break_even_bandwidth, required_compression, scenario, sweep
