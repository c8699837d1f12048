"""What training code uses: DDP communication hooks and the collectives behind them."""
from .hooks import hook, register
from .state import HookState, SharedRandomnessMismatch

__all__ = ["HookState", "SharedRandomnessMismatch", "hook", "register"]
