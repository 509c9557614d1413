# not Python
class ModelNew(nn.Module:
    pass
