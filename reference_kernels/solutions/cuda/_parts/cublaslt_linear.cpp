// y[M, N] = x[M, K] W[N, K]^T + b for bf16 / fp16: one cuBLASLt call with its bias epilogue,
// the kernel eager's F.linear runs (same tile choice, same single rounding of the biased
// sum), with everything but the call itself set up once. These forwards are paced by the
// host (the GPU needs 17-70 us, a launch sequence on the H100 machine's CPU 60-130 us), so
// host time is time: per call at::addmm asked cuBLASLt's heuristic (its host side took
// 24 us, the matmul alone 12.6 us), torch's handle and workspace getters took 5.8 us more.
// The extension links -lcublasLt (the CUDA toolkit's; torch has loaded the same library).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

namespace kblt {

// The tensors' element type as launch_bias_act_res_ln takes it (layernorm_epilogue.cuh's KbDtype).
inline int kb_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? 1 : t == at::kHalf ? 2 : 0;
}

inline void check(cublasStatus_t s, const char* what) {
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt ", what, ": status ", static_cast<int>(s));
}

constexpr size_t kWorkspace = 32 << 20;  // what torch gives cuBLASLt on Hopper

struct Plan {  // one (M, N, K, dtype, device): descriptors and algorithm, kept for the process
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
};

// Row-major y = x W^T is column-major y^T[N, M] = W^T (W as a K x N column-major matrix,
// transposed) times x^T (K x M): cuBLAS's "TN" product, bias per output feature (row of y^T).
inline Plan make_plan(int64_t M, int64_t N, int64_t K, cudaDataType_t t) {
  Plan p;
  check(cublasLtCreate(&p.handle), "handle");
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t trans = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)), "transb");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
        "bias epilogue");
  check(cublasLtMatrixLayoutCreate(&p.a, t, K, N, K), "W layout");
  check(cublasLtMatrixLayoutCreate(&p.b, t, K, M, K), "x layout");
  check(cublasLtMatrixLayoutCreate(&p.d, t, N, M, N), "y layout");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                             sizeof(kWorkspace)), "workspace preference");
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(p.handle, p.op, p.a, p.b, p.d, p.d, pref, 1, &best, &found), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  TORCH_CHECK(found > 0, "cuBLASLt has no algorithm for ", M, "x", N, "x", K);
  p.algo = best.algo;
  return p;
}

// Whether `linear_into` takes these operands: bf16 / fp16, contiguous, 16-byte aligned (the
// plan's kernel was chosen for aligned operands). Otherwise the caller uses at::addmm_out.
inline bool fast(const torch::Tensor& t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
inline bool takes(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const auto dt = x.scalar_type();
  return (dt == at::kBFloat16 || dt == at::kHalf) && fast(x) && fast(w) && fast(b);
}

// y (M x N, contiguous, on the current device) = x W^T + b, on the current stream.
inline void linear_into(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, torch::Tensor& y,
                        int64_t M, int64_t K) {
  const int64_t N = w.size(0);
  if (M == 0) return;
  const auto dt = x.scalar_type();
  const int device = x.get_device();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, Plan> plans;
  // One workspace per stream: two streams must not share one while their GEMMs run.
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::lock_guard<std::mutex> lock(mu);  // the descriptor's bias pointer is shared state
  auto it = plans.find({M, N, K, static_cast<int>(dt), device});
  if (it == plans.end())
    it = plans.emplace(std::make_tuple(M, N, K, static_cast<int>(dt), device),
                       make_plan(M, N, K, dt == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F)).first;
  void*& workspace = workspaces[{device, stream}];
  if (workspace == nullptr) workspace = c10::cuda::CUDACachingAllocator::raw_alloc(kWorkspace);
  Plan& plan = it->second;
  const void* bias = b.data_ptr();
  check(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        "bias pointer");
  const float one = 1.f, zero = 0.f;
  check(cublasLtMatmul(plan.handle, plan.op, &one, w.data_ptr(), plan.a, x.data_ptr(), plan.b, &zero, y.data_ptr(),
                       plan.d, y.data_ptr(), plan.d, &plan.algo, workspace, kWorkspace, stream),
        "matmul");
}

}  // namespace kblt
