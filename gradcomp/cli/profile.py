"""`gradcomp profile`: measure a workload's (or a model's) backward profile on this device."""
from ..evaluation.profiles.measure import measure_profile, profile_factory
from ..evaluation.profiles.profiles import save_profile
from .common import DEVICE, default_of, device, emit, positive_int


def add_profile(pr) -> None:
    pr.add_argument("factory", help="a workload: a built-in (mlp, tiny, cnn, gpt, teacher, "
                    "digits), MODULE:FACTORY or path/to/file.py:FACTORY returning a "
                    "gradcomp.Workload; or a factory returning an nn.Module (e.g. "
                    "torchvision.models:resnet18) with --input-shape")
    pr.add_argument("--input-shape", help="for an nn.Module factory: the shape of its Gaussian "
                    "input, comma-separated, e.g. 32,3,224,224")
    pr.add_argument("--batch-size", type=positive_int, help="passed to a factory that takes "
                    "batch_size")
    pr.add_argument("--out", required=True, help="profile file to write (.json)")
    pr.add_argument("--name", help="profile name (default: the factory name)")
    pr.add_argument("--device", type=device, default=DEVICE, help="the device to measure on")
    pr.add_argument("--repeats", type=positive_int, default=default_of(measure_profile, "repeats"),
                    help="timed iterations")
    pr.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pr.set_defaults(run=_profile)


def _profile(args) -> None:
    profile = profile_factory(args.factory, args.input_shape, args.device,
                              repeats=args.repeats, name=args.name, batch_size=args.batch_size)
    path = save_profile(profile, args.out)
    emit(args, {"path": str(path), "params": profile.numel, "t_iter_single_s":
                profile.t_iter_single},
         f"saved {path}: {len(profile.sizes)} tensors, {profile.numel:,} parameters, "
         f"forward {profile.forward_s * 1e3:.1f} ms, backward {profile.backward_s * 1e3:.1f} ms, "
         f"optimizer {profile.optimizer_s * 1e3:.1f} ms")
