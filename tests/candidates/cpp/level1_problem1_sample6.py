# hang: a host loop that never ends
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        while True:
            pass
