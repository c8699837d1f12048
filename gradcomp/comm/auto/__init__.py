"""The `auto` hook: each bucket goes the way that is fastest in this run, among candidate
methods, decided from measurements reduced across ranks through a small performance model
(`choice`).

    state = gradcomp.comm.register(ddp_model, "auto")            # the default candidates
    state = gradcomp.comm.register(ddp_model, "auto", candidates=["none", "fp16",
                                   ("topk", {"ratio": 0.01, "error_feedback": True})])

Switching is safe: when a bucket moves to another candidate, what the previous one kept for it
(error feedback's residual, PowerSGD's) is added to the bucket's next gradient, so nothing
dropped is lost (unless DDP rebuilt the bucket meanwhile: a residual that no longer fits starts
again from zero, as error feedback does for any method); warm-start memories stay with their
method.
"""
from .route import (AUTO_OPTIONS, DEFAULT_CANDIDATES, AutoRoute, AutoState, Candidates,
                    settings_of)

__all__ = ["AUTO_OPTIONS", "DEFAULT_CANDIDATES", "AutoRoute", "AutoState", "Candidates",
           "settings_of"]
