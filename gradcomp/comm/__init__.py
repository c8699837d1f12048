"""What training code uses: DDP communication hooks, the communicators behind them, and the
collectives they run (block-sparse all-reduce, forest all-reduce)."""
from .agreement import CheckpointMismatch, RankMismatch, SharedRandomnessMismatch
from .auto import DEFAULT_CANDIDATES, AutoState
from .blocksparse import block_sparse_all_reduce
from .checkpoint import AllRanks, hook_state, load_state, save_state
from .communicators import BLOCK_SPARSE_METHODS, COMMUNICATORS
from .forest import forest_all_reduce
from .forest_packing import Forest, pack_forest
from .hooks import build_state, hook, register
from .state import HookState

__all__ = ["AllRanks", "AutoState", "BLOCK_SPARSE_METHODS", "COMMUNICATORS", "DEFAULT_CANDIDATES",
           "CheckpointMismatch", "Forest", "HookState", "RankMismatch", "SharedRandomnessMismatch",
           "block_sparse_all_reduce", "build_state", "forest_all_reduce", "hook", "hook_state",
           "load_state", "pack_forest", "register", "save_state"]
