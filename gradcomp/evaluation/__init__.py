"""Evaluation: model profiles, the end-to-end performance model, benchmarks, what-if analyses,
advice, the report and the testbed.

Subpackages by job, each importing only those before it: `common` <- `workloads` <- `profiles` <- `model` <-
`benches` <- `analyses` <- `report` <- `testbed`; `run` (`gradcomp run`) uses them all. The
names below are re-exported for convenience.
"""
from .analyses.whatif import break_even_bandwidth, required_compression, scenario, sweep
from .common.units import format_rate, parse_rate
from .model.bucketing import DDP, Horovod
from .model.methods import MethodCost
from .model.network import Network
from .model.timeline import Prediction, predict
from .profiles.measure import measure_profile
from .profiles.profiles import Profile, builtin_profiles, load_profile, save_profile
from .workloads.contract import Workload
