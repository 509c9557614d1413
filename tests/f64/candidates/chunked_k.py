# honest: the same fp32 matmul, summed in 1024-term chunks (another order)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        for s in range(0, a.shape[1], 1024):
            out += a[:, s:s + 1024] @ b[s:s + 1024]
        return out
