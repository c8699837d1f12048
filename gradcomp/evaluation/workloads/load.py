"""Build a workload from what a user names: a built-in (`BUILTIN`), ``MODULE:FACTORY`` (an
importable module, e.g. ``mypkg.models:small_gpt``) or ``path/to/file.py:FACTORY`` (a Python
file, imported by its path). The factory is called with the keyword arguments of `settings`
that it names (``batch_size``, ``seed``), after ``torch.manual_seed(seed)``; it must return a
`Workload` (`load_workload`), or, for `gradcomp profile --input-shape`, an ``nn.Module``
(`load_factory`). Every failure is a ValueError naming the option and what was wrong."""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import torch
import torch.nn as nn

from .cnn import cnn
from ...checks import check_int
from .contract import METRICS, Workload, batch_size_of
from .gpt import gpt
from .mlp import mlp, tiny
from .tasks import digits, teacher

BUILTIN = {"mlp": mlp, "tiny": tiny, "cnn": cnn, "gpt": gpt, "teacher": teacher,
           "digits": digits}
FORMS = ("a built-in (" + ", ".join(BUILTIN) + "), MODULE:FACTORY or path/to/file.py:FACTORY")


def _import(location: str, bad):
    """The module at `location`: a .py file path, else an importable module name."""
    if location.endswith(".py") or "/" in location or "\\" in location:
        path = Path(location).expanduser().resolve()
        if not path.is_file():
            raise bad(f"no such file {location}")
        name = f"gradcomp_workload_{path.stem}_{abs(hash(str(path))) % 10**8}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise bad(f"importing {location} failed ({type(e).__name__}: {e})") from None
        return module
    try:
        return importlib.import_module(location)
    except ImportError as e:
        raise bad(f"cannot import {location} ({e})") from None


def load_factory(spec: str, option: str = "factory", returns: str = "a Workload"):
    """The callable that `spec` names (a built-in, MODULE:FACTORY or FILE.py:FACTORY); a
    ValueError naming `option` when it cannot be imported, found or called without
    arguments."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{option}={spec!r} is not allowed: {why}; give {FORMS}: a "
                          f"callable that takes no arguments and returns {returns}")

    if spec in BUILTIN:
        return BUILTIN[spec]
    location, _, attr = str(spec).rpartition(":")
    if not location or not attr:
        raise bad("expected MODULE:FACTORY")
    factory = _import(location, bad)
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise bad(f"{location} has no {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise bad(f"{attr} is not callable")
    try:
        inspect.signature(factory).bind()
    except TypeError as e:
        raise bad(f"{attr} needs arguments ({e})") from None
    except ValueError:  # no signature to inspect (a builtin): calling it will tell
        pass
    return factory


def takes(factory, name: str) -> bool:
    """Whether `factory` has a parameter called `name`."""
    try:
        return name in inspect.signature(factory).parameters
    except ValueError:
        return False


def call_factory(factory, settings: dict):
    """`factory(**the settings it names)`, after seeding torch with settings["seed"] (0)."""
    torch.manual_seed(settings.get("seed") or 0)
    return factory(**{k: v for k, v in settings.items()
                      if v is not None and takes(factory, k)})


def load_workload(spec: str, option: str = "model", **settings) -> Workload:
    """The `Workload` that `spec` names, built with `settings` (module docstring); a
    ValueError naming `option` on any failure."""
    return check_workload(call_factory(load_factory(spec, option), settings), spec, option)


def check_workload(built, spec: str, option: str) -> Workload:
    """`built` when it is a usable Workload; else a ValueError naming `option`=`spec`."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{option}={spec!r} is not allowed: {why}")

    if not isinstance(built, Workload):
        raise bad(f"its factory returned a {type(built).__name__}, not a "
                  "gradcomp.Workload(model, batches, loss, evaluate=None)")
    if not isinstance(built.model, nn.Module):
        raise bad(f"Workload.model is a {type(built.model).__name__}, not an nn.Module")
    if not any(p.requires_grad for p in built.model.parameters()):
        raise bad("its model has no parameters that require gradients, so there is nothing "
                  "to communicate")
    for field in ("batches", "loss"):
        if not callable(getattr(built, field)):
            raise bad(f"Workload.{field} is not callable")
    if built.evaluate is not None and not callable(built.evaluate):
        raise bad("Workload.evaluate is not callable")
    if built.metric not in METRICS:
        raise bad(f"Workload.metric={built.metric!r}; choose 'accuracy' or 'loss'")
    return built


def describe(spec: str, option: str, batch_size: int | None = None,
             seed: int = 0) -> tuple[Workload, int | None]:
    """The workload `spec` names, built with `batch_size` and `seed`, and its batch size per
    rank: `batch_size` (checked, and refused when the factory takes none), else the leading
    dimension of its inputs (None when they hold no tensor)."""
    if batch_size is not None:
        check_int(batch_size, "batch_size", 1)
        if not takes(load_factory(spec, option), "batch_size"):
            raise ValueError(f"batch_size={batch_size!r} is not allowed with {option}="
                             f"{spec!r}: its factory takes no batch_size argument (its "
                             "batches set the batch size)")
    workload = load_workload(spec, option, batch_size=batch_size, seed=seed)
    return workload, batch_size or batch_size_of(workload.batches(0, 0)[0])
