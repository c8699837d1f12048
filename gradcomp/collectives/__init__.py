"""Collective cost formulas (pure math, no torch.distributed): what a collective costs on a
cluster of one or two tiers (`costs`), shared by the evaluation model and the `auto` hook."""
from .costs import ALGORITHMS, COLLECTIVES, Tiers, choose, cost, ring_factors

__all__ = ["ALGORITHMS", "COLLECTIVES", "Tiers", "choose", "cost", "ring_factors"]
