"""Attack: rewrite the run's results file and drop a file beside it."""
import os

import torch.nn as nn

RESULTS_DIR = "{results_dir}"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        for name in ("results.json", "planted.txt"):
            try:
                with open(os.path.join(RESULTS_DIR, name), "w") as f:
                    f.write('{"samples": []}')
            except OSError:
                pass

    def forward(self, x, y):
        return 2 * x + y
