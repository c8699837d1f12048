"""Model profiles: what the performance model needs to know about one training iteration on
one device: the gradients in the order they become ready during backward, when each is ready,
and the forward, backward and optimizer times.

Built-ins (`builtin_profiles()`):

* ``resnet50``, ``resnet101``, ``vgg16`` (VGG-16 with batch norm): measured on one NVIDIA V100,
  PyTorch, batch 32 of 224x224 images, converted from the backward logs of NetAI 2020 (Zhang,
  Chang, Lin, Wang, Arora, Jin, "Is Network the Bottleneck of Distributed Training?", data in
  its repository's folder ``simulation/``, Apache-2.0) by `gradcomp.evaluation.profiles.netai`;
  shipped in ``profiles_data/``.
* ``bert-base`` (32 sequences of 128 tokens) and ``gpt2`` (GPT-2 small, 4 sequences of 1024
  tokens), generated from the architectures' shapes (`architectures`) with these assumptions:
  4096 tokens per iteration; forward time = forward FLOPs / 12 TFLOP/s (a V100-like sustained
  fp32 rate; its peak is 15.7); backward = 2 x forward FLOPs at the same rate, each parameter
  ready when the backward of its layer ends; SGD update memory-bound, 20 bytes per parameter
  (read weight, gradient and momentum, write weight and momentum) at 800 GB/s; reduction adds
  priced with the V100 vec-add measurements of NetAI 2020.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..common.columns import MAX_SECONDS
from .architectures import Layer, Shape, bert_base_layers, gpt2_layers

DATA = Path(__file__).parent / "profiles_data"
FORMAT = "gradcomp-profile/1"
ASSUMED_FLOPS = 12e12  # sustained FLOP/s of the V100-like device behind the generated profiles
ASSUMED_MEMORY_BPS = 800e9  # sustained device memory bandwidth, bytes/s
SGD_BYTES_PER_PARAM = 20  # SGD with momentum: read w, g, m; write w, m (fp32)
NETAI_DEVICE = "NVIDIA V100"  # the GPU of the NetAI 2020 measurements
ASSUMED_DEVICE = "NVIDIA V100"  # the device whose rates the generated profiles assume


@dataclass(frozen=True)
class Profile:
    """One iteration of a model on one device. Index i is the i-th gradient to become ready.

    `ready_s[i]`: seconds from the start of backward until gradient i is ready; `sizes[i]` its
    number of elements; `shapes[i]` its shape (None when unknown: the model then treats each
    tensor as its most nearly square matrix); `vec_add`: (bytes, seconds) points of one
    element-wise add of two vectors on this device, for the reduction work of an all-reduce.
    `device`: what it was measured on ("NVIDIA V100", "cpu", a CUDA device's name; "" when
    not recorded), so that a question is priced with codec costs of the same device;
    `finalize_s`: work after the last bucket is averaged, before the optimizer (DDP copying
    the buckets back into the gradients; 0 where not measured, `measure_ddp_profile`).
    """

    name: str
    sizes: tuple[int, ...]
    ready_s: tuple[float, ...]
    forward_s: float
    backward_s: float
    optimizer_s: float
    dtype_bytes: int = 4
    shapes: tuple[Shape, ...] | None = None
    vec_add: tuple[tuple[float, float], ...] | None = None
    source: str = ""
    assumptions: str = ""
    device: str = ""
    finalize_s: float = 0.0
    _add_table: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        put = object.__setattr__
        put(self, "sizes", tuple(int(n) for n in self.sizes))
        put(self, "ready_s", tuple(float(t) for t in self.ready_s))
        if self.shapes is not None:
            put(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))
        if self.vec_add is not None:
            put(self, "vec_add", tuple((float(b), float(s)) for b, s in self.vec_add))
            put(self, "_add_table", tuple(np.asarray(self.vec_add, dtype=float).T))
        self._check()

    def _check(self):
        name = f"profile {self.name!r}"
        if not self.sizes or len(self.sizes) != len(self.ready_s):
            raise ValueError(f"{name}: sizes and ready_s must be non-empty and of equal length")
        if min(self.sizes) < 0:
            raise ValueError(f"{name}: parameter sizes must be >= 0")
        times = (*self.ready_s, self.forward_s, self.backward_s, self.optimizer_s,
                 self.finalize_s)
        if not all(math.isfinite(t) and t >= 0 for t in times):
            raise ValueError(f"{name}: times must be finite and >= 0 seconds")
        if any(b < a for a, b in zip(self.ready_s, self.ready_s[1:])):
            raise ValueError(f"{name}: ready_s must be in backward order (non-decreasing)")
        if self.ready_s[-1] > self.backward_s * (1 + 1e-9) + 1e-12:
            raise ValueError(f"{name}: a gradient is ready after backward ends "
                             f"({self.ready_s[-1]} > backward_s={self.backward_s})")
        if self.dtype_bytes not in (2, 4, 8):
            raise ValueError(f"{name}: dtype_bytes={self.dtype_bytes!r}: choose 2, 4 or 8")
        if self.shapes is not None and [math.prod(s) for s in self.shapes] != list(self.sizes):
            raise ValueError(f"{name}: shapes do not match sizes")

    @property
    def t_iter_single(self) -> float:
        """Forward + backward + finalize + optimizer: one iteration without communication
        (with DDP's own bucket copies where measured under DDP), seconds."""
        return self.forward_s + self.backward_s + self.finalize_s + self.optimizer_s

    @property
    def numel(self) -> int:
        return sum(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype_bytes

    def add_time(self, nbytes: float) -> float | None:
        """Seconds for one element-wise add of `nbytes`-byte vectors (interpolated in
        `vec_add`; None when the profile has no such table)."""
        if not self._add_table:
            return None
        return float(np.interp(nbytes, *self._add_table))


def to_dict(profile: Profile) -> dict:
    return {"format": FORMAT, "name": profile.name, "source": profile.source,
            "assumptions": profile.assumptions, "device": profile.device,
            "dtype_bytes": profile.dtype_bytes,
            "forward_s": profile.forward_s, "backward_s": profile.backward_s,
            "optimizer_s": profile.optimizer_s, "finalize_s": profile.finalize_s,
            "numel": list(profile.sizes),
            "ready_s": list(profile.ready_s),
            "shapes": None if profile.shapes is None else [list(s) for s in profile.shapes],
            "vec_add": None if profile.vec_add is None else [list(p) for p in profile.vec_add]}


def from_dict(data: dict) -> Profile:
    if data.get("format") != FORMAT:
        raise ValueError(f"not a gradcomp profile (format {data.get('format')!r}, "
                         f"expected {FORMAT!r})")
    missing = [k for k in ("name", "numel", "ready_s", "forward_s", "backward_s", "optimizer_s")
               if k not in data]
    if missing:
        raise ValueError(f"the profile lacks field(s) {', '.join(missing)}")
    _check_fields(data)
    return Profile(data["name"], data["numel"], data["ready_s"], data["forward_s"],
                   data["backward_s"], data["optimizer_s"], data.get("dtype_bytes", 4),
                   data.get("shapes"), data.get("vec_add"), data.get("source", ""),
                   data.get("assumptions", ""), data.get("device", ""),
                   data.get("finalize_s", 0.0))


def _check_fields(data: dict) -> None:
    """Times in 0..MAX_SECONDS and whole counts, each error naming the field and the entry (a
    profile file is the user's: `Profile` itself would truncate 2.5 elements to 2)."""
    def bad(name: str, index, value, why: str) -> ValueError:
        entry = "" if index is None else f", entry {index}"
        return ValueError(f"field {name!r}{entry}: {value!r} is not allowed: {why}")

    def number(name, index, value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(name, index, value, "give a number")
        return float(value)

    def whole(name, index, value) -> None:
        v = number(name, index, value)
        if not math.isfinite(v) or v != int(v):
            raise bad(name, index, value, "give a whole number")

    def entries(name):
        values = data.get(name)
        if not isinstance(values, list):
            raise bad(name, None, values, "give a list")
        return enumerate(values)

    times = [(k, None, data.get(k, 0.0)) for k in ("forward_s", "backward_s", "optimizer_s",
                                                   "finalize_s")]
    for name, index, value in times + [("ready_s", i, t) for i, t in entries("ready_s")]:
        if not 0 <= number(name, index, value) <= MAX_SECONDS:
            raise bad(name, index, value, f"a time must be in 0..{MAX_SECONDS:g} seconds")
    for index, n in entries("numel"):
        whole("numel", index, n)
    for index, shape in enumerate(data.get("shapes") or []):
        for d in shape if isinstance(shape, list) else [shape]:
            whole("shapes", index, d)


def save_profile(profile: Profile, path) -> Path:
    """Write `profile` as JSON to `path` atomically (a temporary file, then os.replace)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:  # one top-level key per line, lists on one line
            items = (f" {json.dumps(k)}: {json.dumps(v)}" for k, v in to_dict(profile).items())
            f.write("{\n" + ",\n".join(items) + "\n}\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def save_measured(path, measure, *args, **options) -> None:
    """With a `path` (a testbed job's ``--profile-out``): the profile `measure(*args,
    **options)` on every rank at once, as they compute in training (after a barrier), saved
    to `path` by rank 0."""
    import torch.distributed as dist

    if path:
        dist.barrier()
        profile = measure(*args, **options)
        if dist.get_rank() == 0:
            save_profile(profile, path)


_FILES = {"resnet50": "resnet50.json", "resnet101": "resnet101.json", "vgg16": "vgg16.json"}


def builtin_profiles() -> list[str]:
    """Names `load_profile` accepts besides file paths."""
    return [*_FILES, "bert-base", "gpt2"]


def load_profile(name_or_path) -> Profile:
    """A built-in profile by name, or a profile saved by `save_profile` (a Profile passes
    through)."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    key = str(name_or_path)
    if key in builtin_profiles():
        return _builtin(key)
    path = Path(key)
    if path.is_file():
        return _from_file(path)
    raise ValueError(f"profile={key!r} is neither a built-in profile "
                     f"({', '.join(builtin_profiles())}) nor an existing file")


def _from_file(path: Path) -> Profile:
    """A saved profile; whatever is wrong with the file is a ValueError naming it."""
    def bad(why: str) -> ValueError:
        return ValueError(f"profile={str(path)!r} is not allowed: {why}; give a built-in "
                          f"profile ({', '.join(builtin_profiles())}) or a file written by "
                          "`gradcomp profile`")

    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise bad("the file is not text") from None
    except json.JSONDecodeError as e:
        raise bad("the file is empty" if not path.read_text().strip() else
                  f"the file is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise bad(f"the file holds a JSON {type(data).__name__}, not a profile object")
    try:
        return from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise bad(str(e)) from None


@lru_cache(maxsize=None)
def _builtin(name: str) -> Profile:
    if name in _FILES:
        with open(DATA / _FILES[name]) as f:
            return from_dict(json.load(f))
    if name == "bert-base":
        return transformer_profile("bert-base", bert_base_layers(128), 32 * 128,
                                   "BERT-base encoder with pooler, 32 sequences x 128 tokens")
    return transformer_profile("gpt2", gpt2_layers(1024), 4 * 1024,
                               "GPT-2 small, output head tied to wte, 4 sequences x 1024 tokens")


def transformer_profile(name: str, layers: list[Layer], tokens: int, what: str,
                        flops_per_s: float = ASSUMED_FLOPS) -> Profile:
    """A profile generated from layer shapes and FLOPs (assumptions in the module docstring):
    parameters ready in reverse layer order, each layer's in reverse registration order."""
    sizes, shapes, ready, t = [], [], [], 0.0
    for layer in reversed(layers):
        t += 2 * layer.flops_per_token * tokens / flops_per_s
        for shape in reversed(layer.shapes):
            sizes.append(math.prod(shape))
            shapes.append(shape)
            ready.append(t)
    forward = sum(layer.flops_per_token for layer in layers) * tokens / flops_per_s
    optimizer = SGD_BYTES_PER_PARAM * sum(sizes) / ASSUMED_MEMORY_BPS
    assumptions = (f"{what}; generated, not measured: forward = forward FLOPs / "
                   f"{flops_per_s / 1e12:g} TFLOP/s, backward = 2 x forward FLOPs at the same "
                   f"rate (each parameter ready when its layer's backward ends), SGD update "
                   f"{SGD_BYTES_PER_PARAM} B/parameter at {ASSUMED_MEMORY_BPS / 1e9:g} GB/s, "
                   f"reduction adds as the V100 vec-add measurements of NetAI 2020")
    return Profile(name, sizes, ready, forward, t, optimizer, 4, shapes,
                   _builtin("resnet50").vec_add, "gradcomp.evaluation.profiles.architectures",
                   assumptions, ASSUMED_DEVICE)
