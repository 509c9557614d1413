// Host side of the GEMM + LayerNorm twins; the file sets kEpi (launch_gemm_epilogue's epi:
// 1 = bias + residual, 2 = GELU(bias) + residual) and kName (its extension, for errors) first.
// Picked at run time by dtype: fp32 runs our 3xTF32 GEMM with the epilogue in its tile, then
// LayerNorm; bf16 / fp16 run cuBLASLt's GEMM with its bias epilogue (wgmma + TMA kernels on
// Hopper, the architecture's own on other GPUs: our mma.sync bf16 GEMM reached 28-56 % of it),
// then one kernel for GELU, residual and LayerNorm.
// ---- BEGIN generated from _parts/cublaslt_linear.cpp: edit there, then run reference_kernels/generate.py ----
// ---- END generated from _parts/cublaslt_linear.cpp ----
cudaError_t launch_gemm_epilogue(bool bf16, int epi, const void* x, const void* w, const void* b, const void* res,
                                 void* y, int M, int N, int K, cudaStream_t stream);
cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                            torch::Tensor gamma, torch::Tensor beta, double eps) {
  const auto dt = x.scalar_type();
  const bool half = dt == at::kBFloat16 || dt == at::kHalf;
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || half), "x: CUDA fp32, bf16 or fp16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(half || K % 32 == 0, "fp32: K must be a multiple of 32");
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  auto rc = res.contiguous(), gc = gamma.contiguous(), ec = beta.contiguous();
  // One buffer: the GEMM writes its tile there and LayerNorm rewrites it in place (each warp
  // reads its whole row before writing it). An allocation is 4.3 us of host time here.
  auto out = torch::empty(res.sizes(), res.options());
  const int64_t M = x.numel() / K;
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  auto out2 = out.view({M, N});
  cudaError_t err;
  if (half) {  // x W^T + b, rounded once as eager rounds it
    if (kblt::takes(x, w, b))
      kblt::linear_into(x, w, b, out2, M, K);
    else
      at::addmm_out(out2, b, x.reshape({M, K}), w.t());
    err = launch_bias_act_res_ln(kblt::kb_dtype(dt), kEpi == 2, out.data_ptr(), nullptr, rc.data_ptr(),
                                 gc.data_ptr(), ec.data_ptr(), out.data_ptr(), (int)M, (float)eps, stream);
  } else {
    auto x2 = x.reshape({M, K}).contiguous();
    auto wc = w.contiguous(), bc = b.contiguous();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(wc.data_ptr()) % 16 == 0, "x and weight must be 16-byte aligned");
    err = launch_gemm_epilogue(false, kEpi, x2.data_ptr(), wc.data_ptr(), bc.data_ptr(), rc.data_ptr(),
                               out.data_ptr(), (int)M, (int)N, (int)K, stream);  // act(x W^T + b) + residual
    if (err == cudaSuccess)
      err = launch_bias_act_res_ln(0, false, out.data_ptr(), nullptr, nullptr, gc.data_ptr(), ec.data_ptr(),
                                   out.data_ptr(), (int)M, (float)eps, stream);
  }
  TORCH_CHECK(err == cudaSuccess, kName, " launch: ", cudaGetErrorString(err));
  return out;
}
