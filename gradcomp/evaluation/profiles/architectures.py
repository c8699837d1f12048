"""Parameter shapes of the built-in models, in registration (forward) order, written from the
published architectures; for transformers also the forward FLOPs of each layer.

* ResNet-50/101 and VGG-16 with batch norm as torchvision defines them (He et al. 2016;
  Simonyan and Zisserman 2015): used to attach shapes to the measured NetAI 2020 logs.
* BERT-base encoder (Devlin et al. 2019; Hugging Face `BertModel` with pooler: 109,482,240
  parameters) and GPT-2 small (Radford et al. 2019; `GPT2Model` with the output head tied to the
  token embedding: 124,439,808 parameters).

FLOPs count a multiply-add as 2; a linear layer of in x out weights costs 2*in*out per token
forward, attention scores and context 4*seq*d per token; layer norms and embedding look-ups
count as 0.
"""
from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layer:
    """A forward-order layer: its parameter shapes (registration order) and forward FLOPs per
    token."""

    shapes: tuple[Shape, ...]
    flops_per_token: float = 0.0


def _norm(c: int) -> list[Shape]:
    return [(c,), (c,)]


def resnet_shapes(depth: int) -> list[Shape]:
    """torchvision ResNet-50 (depth 50) or ResNet-101 (depth 101), bottleneck blocks."""
    blocks = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}[depth]
    shapes: list[Shape] = [(64, 3, 7, 7), *_norm(64)]
    inplanes = 64
    for planes, count in zip((64, 128, 256, 512), blocks):
        for i in range(count):
            shapes += [(planes, inplanes, 1, 1), *_norm(planes), (planes, planes, 3, 3),
                       *_norm(planes), (planes * 4, planes, 1, 1), *_norm(planes * 4)]
            if i == 0:  # downsample branch of the first block
                shapes += [(planes * 4, inplanes, 1, 1), *_norm(planes * 4)]
            inplanes = planes * 4
    return shapes + [(1000, 2048), (1000,)]


def vgg16_bn_shapes() -> list[Shape]:
    """torchvision VGG-16 with batch normalisation."""
    shapes: list[Shape] = []
    inplanes = 3
    for width in (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512):
        shapes += [(width, inplanes, 3, 3), (width,), *_norm(width)]
        inplanes = width
    for fan_in, fan_out in ((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)):
        shapes += [(fan_out, fan_in), (fan_out,)]
    return shapes


def _linear(fan_in: int, fan_out: int) -> list[Shape]:
    return [(fan_out, fan_in), (fan_out,)]


def bert_base_layers(seq: int, d: int = 768, ff: int = 3072, depth: int = 12,
                     vocab: int = 30522, positions: int = 512) -> list[Layer]:
    """BERT-base encoder with pooler; the pooler runs on one token of `seq`."""
    layers = [Layer(((vocab, d), (positions, d), (2, d), *_norm(d)))]
    for _ in range(depth):
        qkv = _linear(d, d) * 3
        layers += [Layer(tuple(qkv), 3 * 2 * d * d + 4 * seq * d),
                   Layer((*_linear(d, d), *_norm(d)), 2 * d * d),
                   Layer(tuple(_linear(d, ff)), 2 * d * ff),
                   Layer((*_linear(ff, d), *_norm(d)), 2 * ff * d)]
    return layers + [Layer(tuple(_linear(d, d)), 2 * d * d / seq)]


def gpt2_layers(seq: int, d: int = 768, depth: int = 12, vocab: int = 50257,
                positions: int = 1024) -> list[Layer]:
    """GPT-2 small; weights in the (in, out) layout of its Conv1D; the last layer is the output
    head, tied to the token embedding (FLOPs, no parameters of its own)."""
    layers = [Layer(((vocab, d), (positions, d)))]
    for _ in range(depth):
        layers += [Layer((*_norm(d), (d, 3 * d), (3 * d,)), 2 * d * 3 * d + 4 * seq * d),
                   Layer(((d, d), (d,)), 2 * d * d),
                   Layer((*_norm(d), (d, 4 * d), (4 * d,)), 2 * d * 4 * d),
                   Layer(((4 * d, d), (d,)), 2 * 4 * d * d)]
    return layers + [Layer(tuple(_norm(d))), Layer((), 2 * d * vocab)]
