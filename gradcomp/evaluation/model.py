"""The performance model, in one place: the network's collective costs (`network`), what a
method costs (`methods`), bucketing policies (`bucketing`), the timeline and its prediction
(`timeline`) and the fits of its free parameters (`fit`). See each module for the formulas.
"""
from .bucketing import DDP, Bucket, Horovod, bucketing_policy
from .fit import (Fit, Validation, as_costs, codec_costs, fit_codec, fit_collectives,
                  fit_runs, network_from_fit, summary, validate)
from .methods import MethodCost, assumed_costs, resolve
from .network import Network
from .timeline import Prediction, predict

__all__ = ["Bucket", "DDP", "Fit", "Horovod", "MethodCost", "Network", "Prediction",
           "Validation", "as_costs", "assumed_costs", "bucketing_policy", "codec_costs",
           "fit_codec", "fit_collectives", "fit_runs", "network_from_fit", "predict", "resolve",
           "summary", "validate"]
