"""`gradcomp compressors`: every method on one gradient, bytes on wire, error and time."""
import json
import sys

from ..evaluation.benches.compress import RESNET50_NUMEL, default_methods, measure_codec
from .common import DEVICE, default_of, device, emit, positive_int


def add_compressors(comp) -> None:
    comp.add_argument("--numel", type=positive_int, default=RESNET50_NUMEL,
                      help="gradient size in fp32 values (default: 25.6M, ResNet-50)")
    comp.add_argument("--device", type=device, default=DEVICE,
                      help="device to run on (default: cuda if available, else cpu)")
    comp.add_argument("--repeats", type=positive_int, default=default_of(measure_codec, "repeats"),
                      help="timed repeats (median reported)")
    comp.add_argument("--json", action="store_true", help="print machine-readable JSON")
    comp.set_defaults(run=_compressors)


def _compressors(args) -> None:
    from tabulate import tabulate
    from tqdm import tqdm

    rows = []
    for name, options in tqdm(default_methods(), desc="compressing", disable=args.json,
                              file=sys.stderr):
        rows.append(measure_codec(name, options, args.numel, args.device, repeats=args.repeats))
    if args.json:
        emit(args, rows, "")  # strict JSON, as every command's --json
        return
    table = [[r["method"], _short(json.loads(r["options"])), r["aggregation"],
              f"{r['bytes_sent']:,}", f"{r['ratio']:.1f}x", f"{r['rel_error']:.3g}",
              f"{r['encode_s'] * 1e3:.3g}", f"{r['decode_s'] * 1e3:.3g}"] for r in rows]
    print(f"{args.numel:,} float32 values ({args.numel * 4:,} bytes) on {args.device}, "
          f"median of {args.repeats}:")
    print(tabulate(table, headers=["method", "options", "aggregation", "bytes on wire",
                                   "ratio", "rel. error", "encode ms", "decode ms"]))


def _short(options: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items() if k != "seed")
