"""`register(model, method, **options)`: compress the gradient reduce-scatter of every FSDP
module of a model (`torch.distributed.fsdp.fully_shard`)."""
from __future__ import annotations

import weakref

from torch import nn
from torch.distributed.fsdp import FSDPModule

from ..checks import check_choice
from ..compressors import compressor as build_compressor
from .levels import TwoLevels
from .reduce_scatter import CompressedReduceScatter
from .state import FSDPState

#: The methods whose chunks travel over the all-to-all: the identity (FP32 as is, for
#: comparison), 16-bit casts, block quantizers, and the sparsifiers with a fixed k.
METHODS = ("none", "bf16", "fp16", "int8", "int4", "topk", "randomk")

#: The FSDP modules `register` compressed, each with its state: a second `register` would
#: orphan the first state (its telemetry and residuals), so it is refused, as DDP refuses a
#: second comm hook.
_REGISTERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fsdp_modules(model) -> list[FSDPModule]:
    """The FSDP modules of `model` (itself included), in `model.modules()` order; a clear error
    when there is none."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module with fully_shard applied, got "
                        f"{type(model).__name__}")
    found = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not found:
        raise ValueError("model has no FSDP module: apply torch.distributed.fsdp.fully_shard "
                         "to it (and to its blocks) first")
    return found


def register(model, method: str = "int8", *, error_feedback: bool | None = None,
             telemetry_limit: int = 100_000, mesh=None, across: str | None = None,
             across_options: dict | None = None, **options) -> FSDPState:
    """Make every FSDP module of `model` reduce-scatter its gradients compressed by `method`
    (one of `METHODS`, built as `gradcomp.compressor(method, error_feedback=..., **options)`),
    summed in float32 by each shard's owner. FSDP keeps the scaling: the modules are told
    `set_force_sum_reduction_for_comms(True)`, so FSDP divides after the sum (by the data-parallel
    size, or the factor given to `set_gradient_divide_factor`). Returns the `FSDPState`
    (checkpoint it with `state_dict()`, per rank).

    With `mesh`, a 2-D DeviceMesh over the FSDP group's ranks (dimension 0 across nodes,
    dimension 1 inside a node), the reduce-scatter runs in two steps (`levels`): `method` inside
    each node, then `across` with `across_options` (default: `method` with its options) between
    nodes, e.g.
    ``register(model, "int8", mesh=mesh, across="int4")``."""
    check_choice(method, "method", METHODS)
    comp = build_compressor(method, error_feedback=error_feedback, **options)
    levels = None
    if mesh is not None:
        if across is None:  # the same method and options at both levels
            across, across_options = method, options if across_options is None else across_options
        check_choice(across, "across", METHODS)
        outer = build_compressor(across, error_feedback=error_feedback, **(across_options or {}))
        levels = TwoLevels(mesh, outer)
    elif across is not None or across_options is not None:
        raise ValueError("across and across_options need mesh=: the 2-D DeviceMesh "
                         "(across nodes, inside a node) of the 2-level reduce-scatter")
    state = FSDPState(comp, telemetry_limit=telemetry_limit, levels=levels)
    modules = fsdp_modules(model)
    if any(m in _REGISTERED for m in modules):
        raise RuntimeError("gradcomp.fsdp.register was already called on this model: it can "
                           "only be called once per model (like DDP's register_comm_hook); "
                           "keep the FSDPState the first call returned, or build a new model")
    for index, module in enumerate(modules):
        module.set_force_sum_reduction_for_comms(True)
        module.set_custom_reduce_scatter(CompressedReduceScatter(state, index))
        _REGISTERED[module] = state
    return state
