"""`gradcomp profile`: measure a model's backward profile on this device."""
import importlib

import torch

from ..evaluation.profiles.measure import measure_profile
from ..evaluation.profiles.profiles import save_profile
from .common import DEVICE, default_of, emit, positive_int


def add_profile(sub) -> None:
    pr = sub.add_parser("profile", help="measure your model's backward profile on this device")
    pr.add_argument("factory", help="MODULE:FACTORY returning an nn.Module, e.g. "
                    "torchvision.models:resnet18")
    pr.add_argument("--input-shape", required=True, help="comma-separated, e.g. 32,3,224,224")
    pr.add_argument("--out", required=True, help="profile file to write (.json)")
    pr.add_argument("--name", help="profile name (default: the factory name)")
    pr.add_argument("--device", default=DEVICE)
    pr.add_argument("--repeats", type=positive_int, default=default_of(measure_profile, "repeats"))
    pr.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pr.set_defaults(run=_profile)


def _profile(args) -> None:
    module_name, _, factory = args.factory.partition(":")
    if not factory:
        raise SystemExit(f"gradcomp profile: expected MODULE:FACTORY, got {args.factory!r}")
    model = getattr(importlib.import_module(module_name), factory)().to(args.device)
    shape = [int(d) for d in args.input_shape.split(",")]
    inputs = torch.randn(shape, device=args.device)
    profile = measure_profile(model, inputs, repeats=args.repeats, name=args.name or factory)
    path = save_profile(profile, args.out)
    emit(args, {"path": str(path), "params": profile.numel, "t_iter_single_s":
                profile.t_iter_single},
         f"saved {path}: {len(profile.sizes)} tensors, {profile.numel:,} parameters, "
         f"forward {profile.forward_s * 1e3:.1f} ms, backward {profile.backward_s * 1e3:.1f} ms, "
         f"optimizer {profile.optimizer_s * 1e3:.1f} ms")
