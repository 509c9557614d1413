// Host side of the GEMM + LayerNorm twins; the file sets kEpi (launch_gemm_epilogue's epi:
// 1 = bias + residual, 2 = GELU(bias) + residual) and kName (its extension, for errors) first.
cudaError_t launch_gemm_epilogue(bool bf16, int epi, const void* x, const void* w, const void* b, const void* res,
                                 void* y, int M, int N, int K, cudaStream_t stream);
cudaError_t launch_bias_act_res_ln(bool bf16, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

constexpr bool kBf16Cublas = false;  // bf16: cuBLAS GEMM + our fused epilogue instead

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                            torch::Tensor gamma, torch::Tensor beta, double eps) {
  const auto dt = x.scalar_type();
  const bool bf16 = dt == at::kBFloat16;
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || bf16), "x: CUDA fp32 or bf16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(K % (128 / x.element_size()) == 0, "K must be a multiple of ", 128 / x.element_size());
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  auto x2 = x.reshape({-1, K}).contiguous();
  auto wc = w.contiguous(), bc = b.contiguous(), rc = res.contiguous(), gc = gamma.contiguous(),
       ec = beta.contiguous();
  auto out = torch::empty(res.sizes(), res.options());
  const int64_t M = x2.size(0);
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  cudaError_t err;
  if (bf16 && kBf16Cublas) {
    auto y = at::addmm(bc, x2, wc.t());  // the call eager makes: same rounding
    err = launch_bias_act_res_ln(true, kEpi == 2, y.data_ptr(), nullptr, rc.data_ptr(), gc.data_ptr(),
                                 ec.data_ptr(), out.data_ptr(), (int)M, (float)eps, stream);
  } else {
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(wc.data_ptr()) % 16 == 0, "x and weight must be 16-byte aligned");
    auto v = torch::empty({M, N}, x.options());  // act(x W^T + b) + residual
    err = launch_gemm_epilogue(bf16, kEpi, x2.data_ptr(), wc.data_ptr(), bc.data_ptr(), rc.data_ptr(), v.data_ptr(),
                               (int)M, (int)N, (int)K, stream);
    if (err == cudaSuccess)
      err = launch_bias_act_res_ln(bf16, false, v.data_ptr(), nullptr, nullptr, gc.data_ptr(), ec.data_ptr(),
                                   out.data_ptr(), (int)M, (float)eps, stream);
  }
  TORCH_CHECK(err == cudaSuccess, kName, " launch: ", cudaGetErrorString(err));
  return out;
}
