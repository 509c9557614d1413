// Float math with no branch, no table and no libm call, so that GCC vectorizes the loops
// around it (-O3 -march=native; -fno-trapping-math lets it if-convert the clamps).
#include <cstdint>

// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in float beyond): the rational
// approximation Eigen and XLA use for float erf, |error| < 5e-7 in float arithmetic.
static inline float erf_approx(float x) {
  x = x < -4.f ? -4.f : (x > 4.f ? 4.f : x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

// Exact GELU: x/2 (1 + erf(x / sqrt 2)).
static inline float gelu_erf(float x) { return 0.5f * x * (1.f + erf_approx(x * 0.70710678118654752f)); }

// exp(x) = 2^n e^r, n = round(x log2 e) (by adding 1.5 * 2^23, whose low mantissa bits then
// hold n), r = x - n ln 2 in two steps (Cody-Waite), e^r by Cephes' degree-7 polynomial:
// relative error ~2e-7. x is clamped to [-87, 88], where 2^n stays a normal float.
static inline float exp_approx(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float shifted = x * 1.44269504088896341f + 12582912.f;
  const float n = shifted - 12582912.f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  int32_t bits;
  __builtin_memcpy(&bits, &shifted, 4);
  bits = (bits - 0x4B400000 + 127) << 23;  // 2^n
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return p * scale;
}
