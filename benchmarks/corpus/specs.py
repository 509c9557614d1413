"""What the corpus's hand-written candidates compute (benchmarks/corpus/make_corpus.py):
per KernelBench problem, the operation in PyTorch, as a CUDA expression and the bad
variant a sample of it may be.

OPS: level-1 elementwise problems: problem id -> (name, PyTorch expression of x and
self.p, CUDA expression of v and p, Triton expression (unused now), default p, the
problem's bad kind).

L2: level-2 problems whose forward is one conv / GEMM module followed by an elementwise
tail. Per problem: the reference's constructor (args, layers: the same attributes, so the
state_dict keys and shapes match), the conv/GEMM call (op), and the tail as statements:
PyTorch on the op's output `y` (leaving the result in y), CUDA on one element `v`.
chans: per-channel parameters (C values, C = dim 1 of the output), which the kernels read
at c = (i / inner) % C; scalars: kernel argument name -> the Python value passed. bad:
the problem's bad kind; wrong: its CUDA tail when wrong.
"""

OPS = {
    19: ("ReLU", "torch.clamp_min(x, 0.0)", "fmaxf(v, 0.f)", "tl.maximum(v, 0.0)",
         0.0, "slow"),
    20: ("LeakyReLU", "torch.where(x > 0, x, x * self.p)", "v > 0.f ? v : v * p",
         "tl.where(v > 0, v, v * p)", 0.01, "crash"),
    21: ("Sigmoid", "1.0 / (1.0 + torch.exp(-x))", "1.f / (1.f + expf(-v))",
         "1.0 / (1.0 + tl.exp(-v))", 0.0, "wrong"),
    22: ("Tanh", "2.0 * torch.sigmoid(2.0 * x) - 1.0", "tanhf(v)",
         "2.0 / (1.0 + tl.exp(-2.0 * v)) - 1.0", 0.0, "slow"),
    25: ("Swish", "x / (1.0 + torch.exp(-x))", "v / (1.f + expf(-v))",
         "v / (1.0 + tl.exp(-v))", 0.0, "crash"),
    26: ("GELU_", "0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))",
         "0.5f * v * (1.f + erff(v * 0.70710678118654752f))", None, 0.0, "wrong"),
    27: ("SELU_", "1.0507009873554805 * torch.where(x > 0, x, 1.6732632423543772 * "
         "torch.expm1(x))", "1.0507009873554805f * (v > 0.f ? v : 1.6732632423543772f * "
         "expm1f(v))", "1.0507009873554805 * tl.where(v > 0, v, 1.6732632423543772 * "
         "(tl.exp(v) - 1.0))", 0.0, "slow"),
    28: ("HardSigmoid", "torch.clamp(x / 6.0 + 0.5, 0.0, 1.0)",
         "fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f)",
         "tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)", 0.0, "crash"),
    29: ("Softplus", "torch.where(x > 20.0, x, torch.log1p(torch.exp(x)))",
         "v > 20.f ? v : log1pf(expf(v))", "tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
         0.0, "wrong"),
    30: ("Softsign", "x / (1.0 + x.abs())", "v / (1.f + fabsf(v))",
         "v / (1.0 + tl.abs(v))", 0.0, "slow"),
    31: ("ELU", "torch.where(x > 0, x, self.p * torch.expm1(x))",
         "v > 0.f ? v : p * expm1f(v)", "tl.where(v > 0, v, p * (tl.exp(v) - 1.0))", 1.0,
         "crash"),
    32: ("HardTanh", "torch.clamp(x, -1.0, 1.0)", "fminf(fmaxf(v, -1.f), 1.f)",
         "tl.minimum(tl.maximum(v, -1.0), 1.0)", 0.0, "wrong"),
}

L2 = {
    1: dict(name="Conv2D_ReLU_BiasAdd", args="in_channels, out_channels, kernel_size, bias_shape",
            layers=["self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)",
                    "self.bias = nn.Parameter(torch.randn(bias_shape))"],
            op="self.conv(x)", chans=["bias"], scalars={},
            torch=["y = torch.clamp_min(y, 0.0) + self.bias"],
            cuda=["v = fmaxf(v, 0.f) + bias[c];"],
            triton=["v = tl.maximum(v, 0.0) + bias"],
            bad="wrong", wrong=["v = fmaxf(v, 0.f) + bias[i % channels];"]),  # NHWC's channel
    12: dict(name="Gemm_Multiply_LeakyReLU",
             args="in_features, out_features, multiplier, negative_slope",
             layers=["self.gemm = nn.Linear(in_features, out_features)",
                     "self.multiplier = multiplier",
                     "self.leaky_relu = nn.LeakyReLU(negative_slope)"],
             op="self.gemm(x)", chans=[],
             scalars={"multiplier": "self.multiplier", "slope": "self.leaky_relu.negative_slope"},
             torch=["z = y * self.multiplier",
                    "y = torch.where(z > 0, z, z * self.leaky_relu.negative_slope)"],
             cuda=["v *= multiplier;", "v = v > 0.f ? v : v * slope;"],
             triton=["v = v * multiplier", "v = tl.where(v > 0, v, v * slope)"],
             bad="slow"),
    16: dict(name="ConvTranspose2d_Mish_Add_Hardtanh_Scaling",
             args="in_channels, out_channels, kernel_size, stride, padding, output_padding, "
                  "add_value, scale",
             layers=["self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, "
                     "kernel_size, stride, padding, output_padding)",
                     "self.add_value = add_value", "self.scale = scale"],
             op="self.conv_transpose(x)", chans=[],
             scalars={"add_value": "self.add_value", "scale": "self.scale"},
             torch=["z = y * F.softplus(y).tanh() + self.add_value",  # Mish, then add
                    "y = z.clamp(-1.0, 1.0) * self.scale"],
             cuda=["float sp = v > 20.f ? v : log1pf(expf(v));",
                   "v = fminf(fmaxf(v * tanhf(sp) + add_value, -1.f), 1.f) * scale;"],
             triton=["sp = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
                     "v = v * (2.0 * tl.sigmoid(2.0 * sp) - 1.0) + add_value",
                     "v = tl.minimum(tl.maximum(v, -1.0), 1.0) * scale"],
             bad="wrong", wrong=["float sp = v > 20.f ? v : log1pf(expf(v));",
                                 "v = fminf(fmaxf(v * tanhf(sp) + add_value, -1.f), 1.f);",
                                 "v /= scale;"]),  # divided by the scale, not multiplied
    20: dict(name="ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd",
             args="in_channels, out_channels, kernel_size, stride, padding, output_padding, "
                  "bias_shape",
             layers=["self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, "
                     "kernel_size, stride=stride, padding=padding, output_padding=output_padding)",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.conv_transpose(x)", chans=["bias"], scalars={},
             torch=["y = torch.addcmul(y, y + self.bias + y, y)"],  # ((y + b) + y) * y + y
             cuda=["v = fmaf(v + bias[c] + v, v, v);"],
             triton=["v = (v + bias + v) * v + v"],
             bad="crash"),
    47: dict(name="Conv3d_Mish_Tanh",
             args="in_channels, out_channels, kernel_size, stride=1, padding=0",
             layers=["self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, "
                     "stride=stride, padding=padding)"],
             op="self.conv(x)", chans=[], scalars={},
             torch=["y = torch.tanh(y * torch.tanh(F.softplus(y)))"],
             cuda=["float sp = v > 20.f ? v : log1pf(expf(v));", "v = tanhf(v * tanhf(sp));"],
             triton=["sp = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
                     "v = v * (2.0 * tl.sigmoid(2.0 * sp) - 1.0)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0"],
             bad="wrong", wrong=["v = tanhf(v);",  # tanh before Mish: the order swapped
                                 "v = v * tanhf(log1pf(expf(v)));"]),
    48: dict(name="Conv3d_Scaling_Tanh_Multiply_Sigmoid",
             args="in_channels, out_channels, kernel_size, scaling_factor, bias_shape",
             layers=["self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)",
                     "self.scaling_factor = nn.Parameter(torch.randn(bias_shape))",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.conv(x)", chans=["scaling_factor", "bias"], scalars={},
             torch=["t = torch.tanh(y * self.scaling_factor) * self.bias",
                    "y = 0.5 + 0.5 * torch.tanh(0.5 * t)"],  # sigmoid(t)
             cuda=["v = tanhf(v * scaling_factor[c]) * bias[c];", "v = 1.f / (1.f + expf(-v));"],
             triton=["v = tl.sigmoid((2.0 * tl.sigmoid(2.0 * v * scaling_factor) - 1.0) * bias)"],
             bad="crash"),
    57: dict(name="Conv2d_ReLU_HardSwish", args="in_channels, out_channels, kernel_size",
             layers=["self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)"],
             op="self.conv(x)", chans=[], scalars={},
             torch=["y = F.hardswish(torch.relu(y))"],
             cuda=["v = fmaxf(v, 0.f);", "v = v * fminf((v + 3.f) / 6.f, 1.f);"],
             triton=["v = tl.maximum(v, 0.0)", "v = v * tl.minimum((v + 3.0) / 6.0, 1.0)"],
             bad="crash"),
    76: dict(name="Gemm_Add_ReLU", args="in_features, out_features, bias_shape",
             layers=["self.gemm = nn.Linear(in_features, out_features, bias=False)",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.gemm(x)", chans=["bias"], scalars={},
             torch=["y = (y + self.bias).clamp_min(0.0)"],
             cuda=["v = fmaxf(v + bias[c], 0.f);"],
             triton=["v = tl.maximum(v + bias, 0.0)"],
             bad="slow"),
    81: dict(name="Gemm_Swish_Divide_Clamp_Tanh_Clamp",
             args="in_features, out_features, bias=True",
             layers=["self.gemm = nn.Linear(in_features, out_features, bias=bias)"],
             op="self.gemm(x)", chans=[], scalars={},
             # tanh of [-1, 1] stays in [-1, 1]: the reference's last clamp changes nothing
             torch=["y = torch.tanh((0.5 * y * torch.sigmoid(y)).clamp(-1.0, 1.0))"],
             cuda=["v = 0.5f * v / (1.f + expf(-v));", "v = tanhf(fminf(fmaxf(v, -1.f), 1.f));"],
             triton=["v = tl.minimum(tl.maximum(0.5 * v * tl.sigmoid(v), -1.0), 1.0)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0"],
             bad="crash"),
    95: dict(name="Matmul_Add_Swish_Tanh_GELU_Hardtanh",
             args="in_features, out_features, add_value_shape",
             layers=["self.matmul = nn.Linear(in_features, out_features)",
                     "self.add_value = nn.Parameter(torch.randn(add_value_shape))"],
             op="self.matmul(x)", chans=["add_value"], scalars={},
             torch=["z = F.silu(y + self.add_value)",
                    "y = F.gelu(torch.tanh(z)).clamp(-1.0, 1.0)"],
             cuda=["v += add_value[c];", "v = tanhf(v / (1.f + expf(-v)));",
                   "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
                   "v = fminf(fmaxf(v, -1.f), 1.f);"],
             triton=["v = v + add_value", "v = v * tl.sigmoid(v)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0",
                     "v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))",
                     "v = tl.minimum(tl.maximum(v, -1.0), 1.0)"],
             bad="slow"),
}
