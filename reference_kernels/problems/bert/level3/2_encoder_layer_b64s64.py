"""One BERT-base encoder layer (hidden 768, 12 heads x 64, FFN 3072, post-LN, no mask), input (64, 64, 768)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, HIDDEN, HEADS, INTERMEDIATE = 64, 64, 768, 12, 3072
EPS = 1e-12


class Model(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, eps: float):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.attention_dense = nn.Linear(hidden_size, hidden_size)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.output_dense = nn.Linear(intermediate_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=eps)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        return x.view(batch, seq, self.num_heads, hidden // self.num_heads).transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = hidden_states.shape
        q = self.split_heads(self.query(hidden_states))
        k = self.split_heads(self.key(hidden_states))
        v = self.split_heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.transpose(1, 2).reshape(batch, seq, hidden)
        attention = self.attention_norm(self.attention_dense(context) + hidden_states)
        intermediate = F.gelu(self.intermediate(attention))
        return self.output_norm(self.output_dense(intermediate) + attention)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS, INTERMEDIATE, EPS]
