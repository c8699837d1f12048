"""DiLoCo and Streaming DiLoCo: each rank trains alone for `sync_every` steps, then the ranks
average the compressed pseudo-gradients (any gradcomp method, with error feedback) and an outer
optimizer applies them.

    with gradcomp.diloco.DiLoCo(model, inner_opt, outer_opt, sync_every=100, method="int8"):
        ...  # the usual training loop, on a plain (not DDP) model
"""
from .diloco import FORMAT, DiLoCo
from .fragments import split

__all__ = ["DiLoCo", "FORMAT", "split"]
