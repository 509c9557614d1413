"""Where time goes, in eight categories, by aten operator (or by kernel name for kernels
launched outside any operator). Convolutions count as matmul (implicit GEMMs),
reductions as elementwise (memory-bound), views and allocations as memory/copy."""

from __future__ import annotations

import re

CATEGORIES = ["matmul", "normalization", "activation", "attention/softmax", "embedding",
              "elementwise", "memory/copy", "other"]

_OPS = {
    "matmul": "mm addmm bmm baddbmm matmul linear addmv mv dot einsum conv1d conv2d conv3d "
              "convolution _convolution cudnn_convolution mkldnn_convolution "
              "conv_transpose1d conv_transpose2d conv_transpose3d _scaled_mm "
              "mkldnn_linear _addmm_activation addbmm tensordot",
    "normalization": "layer_norm native_layer_norm batch_norm native_batch_norm "
                     "_batch_norm_impl_index cudnn_batch_norm _native_batch_norm_legit "
                     "_native_batch_norm_legit_no_training group_norm native_group_norm "
                     "instance_norm rms_norm _fused_rms_norm local_response_norm "
                     "normalize",
    "activation": "gelu relu relu_ silu silu_ tanh tanh_ sigmoid sigmoid_ hardtanh elu "
                  "leaky_relu mish softplus hardswish hardsigmoid threshold relu6 selu "
                  "celu glu prelu _prelu_kernel",
    "attention/softmax": "softmax _softmax log_softmax _log_softmax "
                         "scaled_dot_product_attention _scaled_dot_product_flash_attention "
                         "_scaled_dot_product_efficient_attention "
                         "_scaled_dot_product_cudnn_attention "
                         "_scaled_dot_product_flash_attention_for_cpu "
                         "_flash_attention_forward _efficient_attention_forward",
    "embedding": "embedding embedding_bag _embedding_bag",
    "elementwise": "add add_ sub sub_ mul mul_ div div_ addcmul addcdiv pow sqrt rsqrt exp "
                   "log neg abs where masked_fill masked_fill_ clamp clamp_ clamp_min "
                   "maximum minimum erf sin cos reciprocal sign floor ceil round lerp "
                   "sum mean amax amin max min argmax argmin cumsum cumprod prod var std "
                   "var_mean norm linalg_vector_norm logsumexp eq ne lt gt le ge "
                   "logical_and logical_or bitwise_and dropout native_dropout square",
    "memory/copy": "copy_ contiguous clone to _to_copy cat stack transpose t permute view "
                   "reshape _unsafe_view expand fill_ zero_ zeros zeros_like ones "
                   "ones_like empty empty_like empty_strided full index index_select "
                   "gather scatter scatter_ pad constant_pad_nd as_strided split chunk "
                   "narrow slice select unsqueeze squeeze flatten repeat detach "
                   "resize_ unbind new_empty new_zeros alias lift_fresh _reshape_alias "
                   "index_put_ roll flip tril triu unfold",
}
_BY_OP = {op: cat for cat, names in _OPS.items() for op in names.split()}

# Kernel names: checked in this order (a fused "gemm ... gelu" kernel is a matmul).
_KERNEL_PATTERNS = [
    ("matmul", r"gemm|gemv|matmul|cutlass|cublas|wgmma|mma|sm\d+_xmma|conv|dot_kernel"),
    ("attention/softmax", r"softmax|attention|fmha|flash"),
    ("normalization", r"layer_?norm|rms_?norm|batch_?norm|group_?norm"),
    ("embedding", r"embedding"),
    ("activation", r"gelu|relu|silu|swish|tanh|sigmoid|elu"),
    ("memory/copy", r"memcpy|memset|copy|transpose|cat_|fill|pad"),
    ("elementwise", r"elementwise|vectorized|reduce|add|mul|bias"),
]


def op_category(op_name: str) -> str:
    """The category of an operator name such as "aten::addmm" (others: "other")."""
    if not op_name.startswith("aten::"):
        return "other"
    base = op_name.removeprefix("aten::").split(".")[0]
    return _BY_OP.get(base, "other")


def kernel_category(kernel_name: str) -> str:
    name = kernel_name.lower()
    for category, pattern in _KERNEL_PATTERNS:
        if re.search(pattern, name):
            return category
    return "other"


def category_of(op_name: str | None, kernel_name: str | None = None) -> str:
    """An operator's category, else its kernel's (extension kernels have only a name)."""
    category = op_category(op_name) if op_name else "other"
    if category == "other" and kernel_name:
        return kernel_category(kernel_name)
    return category
