"""What training code uses: DDP communication hooks and the collectives behind them."""
from .blocksparse import block_sparse_all_reduce
from .forest import forest_all_reduce
from .forest_packing import Forest, pack_forest
from .hooks import hook, register
from .state import BLOCK_SPARSE_METHODS, HookState, SharedRandomnessMismatch

__all__ = ["BLOCK_SPARSE_METHODS", "Forest", "HookState", "SharedRandomnessMismatch", "block_sparse_all_reduce",
           "forest_all_reduce", "hook", "pack_forest", "register"]
