"""Hugging Face Accelerate: gradcomp's hook on the model `accelerator.prepare` returned, and
every rank's hook state in `accelerator.save_state` / `load_state`.

    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    state = gradcomp.integrations.accelerate.register(accelerator, model, "topk", ratio=0.01,
                                                      error_feedback=True)

is `gradcomp.comm.register(model, ...)` followed by
`accelerator.register_for_checkpointing(gradcomp.comm.AllRanks(model))`. (Accelerate's own
`DistributedDataParallelKwargs(comm_hook=...)` takes only its enum of torch's hooks.)
Accelerate is not imported here: any object with `register_for_checkpointing` will do.
"""
from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from ..comm import AllRanks, HookState, register as register_hook


def register(accelerator, model, method: str = "none", **options) -> HookState:
    """Register gradcomp's hook with `method` (options as for `gradcomp.comm.register`) on the
    DDP `model` that `accelerator.prepare` returned, and its state (every rank's, gathered to
    the main process) for `accelerator.save_state` / `load_state`. Call it before
    `accelerator.load_state`, which then restores the state."""
    if not hasattr(accelerator, "register_for_checkpointing"):
        raise TypeError(f"accelerator must be an accelerate.Accelerator, got "
                        f"{type(accelerator).__name__}")
    config = getattr(accelerator, "project_configuration", None)
    if getattr(config, "save_on_each_node", False):
        raise ValueError("ProjectConfiguration(save_on_each_node=True) is not supported: the "
                         "hook states are gathered to the main process, so other nodes' files "
                         "would lack their ranks; save on the main node (the default)")
    if not isinstance(model, DistributedDataParallel):
        raise ValueError(f"model must be what accelerator.prepare returned for a multi-process "
                         f"run, a DistributedDataParallel; got {type(model).__name__} (one "
                         "process, or a distributed type other than MULTI_CPU / MULTI_GPU?): "
                         "launch with accelerate launch --num_processes 2 or more")
    state = register_hook(model, method, **options)
    accelerator.register_for_checkpointing(AllRanks(model))
    return state
