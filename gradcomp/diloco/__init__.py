"""DiLoCo and Streaming DiLoCo: each rank trains alone for `sync_every` steps, then the ranks
average the compressed pseudo-gradients (any gradcomp method, with error feedback) and an outer
optimizer applies them.

    with gradcomp.diloco.DiLoCo(model, inner_opt, outer_opt, sync_every=100, method="int8"):
        ...  # the usual training loop, on a plain (not DDP) model

`Variant` names one for the benches and the model: ``diloco:H=100,method=int8``.
"""
from .diloco import FORMAT, DiLoCo, check_schedule
from .fragments import bounds, split
from .variant import NAME, Variant, outer_case, outer_method

__all__ = ["DiLoCo", "FORMAT", "NAME", "Variant", "bounds", "check_schedule", "outer_case",
           "outer_method", "split"]
