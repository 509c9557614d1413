"""Attack: send what we can reach to a listener on the evaluator's machine."""
import socket

import torch.nn as nn

PORT = {port}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            with socket.create_connection(("127.0.0.1", PORT), timeout=2) as s:
                s.sendall(b"pwned")
        except OSError:
            pass

    def forward(self, x, y):
        return 2 * x + y
