"""Name -> compressor class; `compressor(name, **options)` builds one."""
from __future__ import annotations

import inspect

from ..checks import check_bool
from .base import Compressor

_REGISTRY: dict[str, type[Compressor]] = {}


def register(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make `cls` buildable by its `name`."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"compressor name {cls.name!r} is empty or already registered")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """The registered method names, in registration order."""
    return list(_REGISTRY)


def compressor_class(name: str) -> type[Compressor]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown compressor {name!r}: choose one of {', '.join(names())}")
    return _REGISTRY[name]


def option_names(name: str) -> list[str]:
    """The options a method accepts (its constructor's keyword arguments)."""
    init = compressor_class(name).__init__
    if init is object.__init__:
        return []
    params = inspect.signature(init).parameters
    return [p for p, v in params.items() if p != "self" and v.kind == v.POSITIONAL_OR_KEYWORD
            or v.kind == v.KEYWORD_ONLY]


def compressor(name: str, *, error_feedback: bool | None = None, **options) -> Compressor:
    """Build the compressor `name` with `options`, with error feedback if asked (None: the
    method's default, on only for methods defined with it, such as PowerSGD)."""
    cls = compressor_class(name)
    if error_feedback is not None:
        check_bool(error_feedback, "error_feedback")
    allowed = option_names(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"option {unknown[0]!r} is not accepted by {name!r}; "
            f"its options are: {', '.join(allowed) or '(none)'}"
        )
    if cls.handles_error_feedback:
        if error_feedback is not None:
            options["error_feedback"] = error_feedback
        return cls(**options)
    built = cls(**options)
    if cls.default_error_feedback if error_feedback is None else error_feedback:
        from .memory import ErrorFeedback

        built = ErrorFeedback(built)
    return built
