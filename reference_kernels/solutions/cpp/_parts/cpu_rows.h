// One row in float, in the cache: vectorized loops (omp simd: SIMD reductions).
#include <cmath>
#include <type_traits>

// ---- BEGIN generated from _parts/cpu_math.h: edit there, then run reference_kernels/generate.py ----
// ---- END generated from _parts/cpu_math.h ----


// out = (v - mean) / sqrt(var + eps) * gamma + beta, given sum = the sum of v: the variance is
// taken of the centred values (a second pass over v), which stays exact for large means.
// out may be v.
static inline void layernorm_row(const float* v, float* out, const float* __restrict gamma,
                                 const float* __restrict beta, int64_t n, float sum, float eps) {
  const float mean = sum / n;
  float sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) sq += (v[i] - mean) * (v[i] - mean);
  const float rstd = 1.f / std::sqrt(sq / n + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = (v[i] - mean) * rstd * gamma[i] + beta[i];
}

// v = softmax(v * scale): the scale is folded into the exponent (scale > 0).
static inline void softmax_row(float* __restrict v, int64_t n, float scale) {
  float m = v[0], sum = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += (v[i] = exp_approx((v[i] - m) * scale));
  const float inv = 1.f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

// softmax_row on each n-wide row of s (rows x n) of dtype T, in place: in float, through the
// scratch tmp (n floats) when T is narrower, each row rounded back to T once.
template <typename T>
static void softmax_rows(T* s, int64_t rows, int64_t n, float scale, float* tmp) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * n;
    if constexpr (std::is_same_v<T, float>) {
      softmax_row(row, n, scale);
    } else {
      for (int64_t i = 0; i < n; ++i) tmp[i] = float(row[i]);
      softmax_row(tmp, n, scale);
      for (int64_t i = 0; i < n; ++i) row[i] = T(tmp[i]);
    }
  }
}
