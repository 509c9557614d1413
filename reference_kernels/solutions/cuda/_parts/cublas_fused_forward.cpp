// ---- BEGIN generated from _parts/cublaslt_linear.cpp: edit there, then run reference_kernels/generate.py ----
// ---- END generated from _parts/cublaslt_linear.cpp ----
cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

torch::Tensor cublas_fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                                   torch::Tensor gamma, torch::Tensor beta, double eps, bool gelu) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf),
              "x: CUDA fp32, bf16 or fp16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  auto rc = res.contiguous(), gc = gamma.contiguous(), ec = beta.contiguous();
  auto out = torch::empty(res.sizes(), res.options());  // the GEMM's output, then LayerNorm's in place
  const int64_t M = x.numel() / K;
  if (M == 0) return out;
  auto out2 = out.view({M, N});
  if (kblt::takes(x, w, b))
    kblt::linear_into(x, w, b, out2, M, K);  // cuBLASLt with its bias epilogue
  else
    at::addmm_out(out2, b, x.reshape({M, K}), w.t());  // fp32 (follows torch's TF32 flag), unaligned operands
  const cudaError_t err = launch_bias_act_res_ln(kblt::kb_dtype(dt), gelu, out.data_ptr(), nullptr,
                                                 rc.data_ptr(), gc.data_ptr(), ec.data_ptr(), out.data_ptr(),
                                                 (int)M, (float)eps, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "bias_act_res_ln launch: ", cudaGetErrorString(err));
  return out;
}
