"""What training code uses: DDP communication hooks and the communicators behind them. The
collectives of their own live in `gradcomp.collectives`; `block_sparse_all_reduce`,
`forest_all_reduce`, `Forest` and `pack_forest` are re-exported here, where the README long
named them."""
from ..collectives import Forest, block_sparse_all_reduce, forest_all_reduce, pack_forest
from .agreement import CheckpointMismatch, RankMismatch, SharedRandomnessMismatch
from .auto import DEFAULT_CANDIDATES, AutoState
from .checkpoint import AllRanks, hook_state, load_state, save_state
from .communicators import BLOCK_SPARSE_METHODS, COMMUNICATORS
from .hooks import build_state, hook, register
from .state import HookState

__all__ = ["AllRanks", "AutoState", "BLOCK_SPARSE_METHODS", "COMMUNICATORS", "DEFAULT_CANDIDATES",
           "CheckpointMismatch", "Forest", "HookState", "RankMismatch", "SharedRandomnessMismatch",
           "block_sparse_all_reduce", "build_state", "forest_all_reduce", "hook", "hook_state",
           "load_state", "pack_forest", "register", "save_state"]
