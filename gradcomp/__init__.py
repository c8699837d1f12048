"""gradcomp: gradient compression for data-parallel training, and a model of when it pays."""
from .compressors import compressor, names

__version__ = "0.1.0"
__all__ = ["compressor", "names", "Workload", "__version__"]


def __getattr__(name):
    """`gradcomp.Workload`, the contract of a user's training job (imported when first used:
    it lives in the evaluation layer)."""
    if name == "Workload":
        from .evaluation.workloads.contract import Workload
        return Workload
    raise AttributeError(f"module 'gradcomp' has no attribute {name!r}")
