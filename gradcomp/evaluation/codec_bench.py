"""Encode/decode cost against bytes saved: one tidy row per method, options and tensor size."""
import json

import torch

from ..compressors import compressor, names
from .timing import median_seconds

RESNET50_NUMEL = 25_600_000


def default_methods() -> list[tuple[str, dict]]:
    """Every registered method with its default options."""
    return [(name, {}) for name in names()]


def measure_codec(name: str, options: dict, numel: int, device="cpu", dtype=torch.float32,
                  repeats: int = 3, warmup: int = 1, seed: int = 0) -> dict:
    """Time compress and decompress of a Gaussian gradient of `numel` values; report bytes on
    the wire, the compression ratio and the relative error ||g - D(C(g))|| / ||g||."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    grad = torch.randn(numel, generator=gen, device=device, dtype=torch.float32).to(dtype)
    comp = compressor(name, **options)
    payload = comp.compress(grad, key="bench")
    encode_s, encode_spread = median_seconds(lambda: comp.compress(grad, key="bench"), device,
                                             repeats, warmup)
    decode_s, decode_spread = median_seconds(lambda: comp.decompress(payload), device,
                                             repeats, warmup)
    out = comp.decompress(payload).double()
    ref = grad.double()
    rel_error = ((ref - out).norm() / ref.norm()).item() if numel else 0.0
    original = numel * grad.element_size()
    return {
        "method": name, "options": json.dumps(comp.options(), sort_keys=True),
        "aggregation": comp.aggregation, "numel": numel,
        "dtype": str(dtype).replace("torch.", ""), "bytes_original": original,
        "bytes_sent": payload.nbytes, "ratio": original / payload.nbytes if payload.nbytes else float("inf"),
        "rel_error": rel_error, "encode_s": encode_s, "decode_s": decode_s,
        "encode_spread_s": encode_spread, "decode_spread_s": decode_spread,
        "repeats": repeats, "device": str(device),
    }
