"""``gpt``: a small GPT-style language model built from a config (nothing downloaded), on
token ids from a fixed random Markov chain.

Model (`GPTConfig`): token and position embeddings, `layers` pre-norm blocks (layer norm,
causal self-attention with a fused query-key-value projection, layer norm, a 4x MLP with
GELU), a final layer norm and a linear head tied to the token embedding. The defaults (vocab
64, context 32, width 64, 4 heads, 2 layers) give 0.1M parameters. Data: sequences of the
Markov chain whose every token has `successors` likely next tokens (seeded by `data_seed`), so
the best possible loss is near log(successors) and a model that learns the chain gets there.
Training batches: `batch_size` sequences of `context` + 1 tokens per (rank, step); inputs the
first `context` ids, targets the next ones (causal LM, cross-entropy over every position).
Metric: the loss on 256 held-out sequences, target 1.8 nats (uniform guessing: 4.16).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .contract import Workload


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    context: int = 32
    width: int = 64
    heads: int = 4
    layers: int = 2


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                 nn.Linear(4 * config.width, config.width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Token ids (batch, time) -> next-token logits (batch, time, vocab)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.context, config.width)
        self.blocks = nn.Sequential(*(Block(config) for _ in range(config.layers)))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():  # GPT-2's initialisation: small weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids):
        where = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.tokens(ids) + self.positions(where))
        return self.head(self.norm(x))


def lm_loss(logits, targets):
    """Causal LM cross-entropy over every position."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def markov_chain(vocab: int, successors: int, gen: torch.Generator) -> torch.Tensor:
    """Transition probabilities: each token's mass on `successors` random next tokens."""
    logits = torch.full((vocab, vocab), -math.inf)
    for token in range(vocab):
        nxt = torch.randperm(vocab, generator=gen)[:successors]
        logits[token, nxt] = torch.randn(successors, generator=gen)
    return logits.softmax(dim=1)


def sequences(chain: torch.Tensor, count: int, length: int, gen: torch.Generator):
    ids = torch.empty(count, length, dtype=torch.long)
    ids[:, 0] = torch.randint(0, len(chain), (count,), generator=gen)
    for t in range(1, length):
        ids[:, t] = torch.multinomial(chain[ids[:, t - 1]], 1, generator=gen).squeeze(1)
    return ids


def gpt(batch_size: int = 16, seed: int = 0, data_seed: int = 0, config: GPTConfig = GPTConfig(),
        successors: int = 4) -> Workload:
    chain = markov_chain(config.vocab, successors, torch.Generator().manual_seed(data_seed))
    held_out = sequences(chain, 256, config.context + 1,
                         torch.Generator().manual_seed(data_seed + 1))
    torch.manual_seed(seed)
    model = GPT(config)

    def batches(rank: int, step: int):
        gen = torch.Generator().manual_seed(((seed * 1009 + rank) * 1_000_003 + step) + 7)
        ids = sequences(chain, batch_size, config.context + 1, gen)
        return ids[:, :-1], ids[:, 1:]

    def evaluate(model):
        device = next(model.parameters()).device
        return lm_loss(model(held_out[:, :-1].to(device)).cpu(), held_out[:, 1:])

    return Workload(model, batches, lm_loss, lambda m: evaluate(m).item(), name="gpt",
                    metric="loss", target=1.8, lr=0.3)
