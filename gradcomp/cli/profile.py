"""`gradcomp profile`: measure a model's backward profile on this device."""
from ..evaluation.profiles.measure import measure_profile, profile_factory
from ..evaluation.profiles.profiles import save_profile
from .common import DEVICE, default_of, device, emit, positive_int


def add_profile(sub) -> None:
    pr = sub.add_parser("profile", help="measure your model's backward profile on this device")
    pr.add_argument("factory", help="MODULE:FACTORY returning an nn.Module, e.g. "
                    "torchvision.models:resnet18")
    pr.add_argument("--input-shape", required=True, help="comma-separated, e.g. 32,3,224,224")
    pr.add_argument("--out", required=True, help="profile file to write (.json)")
    pr.add_argument("--name", help="profile name (default: the factory name)")
    pr.add_argument("--device", type=device, default=DEVICE)
    pr.add_argument("--repeats", type=positive_int, default=default_of(measure_profile, "repeats"))
    pr.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pr.set_defaults(run=_profile)


def _profile(args) -> None:
    profile = profile_factory(args.factory, args.input_shape, args.device,
                              repeats=args.repeats, name=args.name)
    path = save_profile(profile, args.out)
    emit(args, {"path": str(path), "params": profile.numel, "t_iter_single_s":
                profile.t_iter_single},
         f"saved {path}: {len(profile.sizes)} tensors, {profile.numel:,} parameters, "
         f"forward {profile.forward_s * 1e3:.1f} ms, backward {profile.backward_s * 1e3:.1f} ms, "
         f"optimizer {profile.optimizer_s * 1e3:.1f} ms")
