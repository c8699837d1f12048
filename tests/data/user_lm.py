"""A user's workload file, as `gradcomp ... --model tests/data/user_lm.py:small_lm` loads it: a
small causal transformer built from a config, trained on token ids (no download)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradcomp

CONFIG = {"vocab": 50, "context": 16, "width": 32, "heads": 2, "layers": 2}


class TinyLM(nn.Module):
    def __init__(self, vocab, context, width, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.blocks(self.embed(ids) + self.position[:ids.shape[1]],
                                     mask=mask, is_causal=True))


def small_lm():
    model = TinyLM(**CONFIG)

    def batches(rank, step):
        gen = torch.Generator().manual_seed(rank * 100_000 + step)
        # a learnable "language": each sequence counts up by a step of 1 or 2 (mod vocab)
        start = torch.randint(0, CONFIG["vocab"], (8, 1), generator=gen)
        stride = torch.randint(1, 3, (8, 1), generator=gen)
        ids = (start + stride * torch.arange(CONFIG["context"] + 1)) % CONFIG["vocab"]
        return ids[:, :-1], ids[:, 1:]

    def loss(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    held_out = batches(rank=99, step=0)

    def evaluate(model):
        return loss(model(held_out[0]), held_out[1]).item()

    return gradcomp.Workload(model, batches, loss, evaluate, name="small_lm", metric="loss",
                             target=2.0, lr=0.1)
