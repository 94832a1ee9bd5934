/*
 * yasgd_ops.cc -- the "patched MXNet operators" of yasgd, loaded into MXNet 1.9.1
 * through its extension seam (mxnet/lib_api.h + mx.library.load), never a fork.
 *
 * Paper: Yamazaki et al., "Yet Another Accelerated SGD", arXiv 1903.12650, section 2:
 * "batched norm computation" -- LARS needs ||w|| and ||g|| of every layer; most
 * ResNet-50 layers are too small to keep the machine busy, so ONE call computes the
 * norms of all layers at once.  LARS: You, Gitman, Ginsburg, arXiv 1708.03888.
 *
 * Operators (all CPU; see yasgd/ops/__init__.py for the Python API):
 *
 *   yasgd_multi_sum_sq(x_0 .. x_{N-1}; num_arrays=N) -> float32 (N,)
 *       out[i] = sum_j x_i[j]^2.  Inputs float32 or float16 (mixed allowed).
 *       Every term is squared exactly in double (a float32 or float16 value squared
 *       fits in a double's 53-bit mantissa) and accumulated in DOUBLE, so the only
 *       rounding that matters is the final double -> float32 (relative 6e-8).
 *       Work is split into fixed chunks of kChunk elements (OpenMP over chunks of all
 *       arrays together, so one big layer and 160 small ones balance); the chunk
 *       partials are summed in a fixed order: the result is bit-identical for any
 *       number of threads.
 *
 *   yasgd_lars_trust_ratio(lrs, w_sq, g_sq, wds; eta, eps, rescale_grad) -> float32 (N,)
 *       out[i] = lrs[i] * eta * |w| / (|g| * rescale_grad + wds[i] * |w| + eps)
 *       with |w| = sqrt(w_sq[i]), |g| = sqrt(g_sq[i]); out[i] = lrs[i] when |w| == 0
 *       or |g| == 0 (MXNet's multi_lars semantics).  Computed in double.
 *
 *   yasgd_multi_sgd_mom_update(w_0, g_0, m_0, [w32_0,] ..., lrs, wds;
 *                              num_weights, momentum, rescale_grad,
 *                              clip_gradient, multi_precision, defer_weights)
 *                              -> w_0' .. w_{N-1}'
 *       per element, exactly MXNet's preloaded_multi_(mp_)sgd_mom_update arithmetic:
 *         m = momentum*m - (lr*wd)*w - (lr*rescale)*g     (g clipped first if clip > 0:
 *                                                          m = ... - lr*clip(rescale*g))
 *         w = w + m
 *       multi_precision=1: w is the fp32 master copy w32 (updated in place); the fp16
 *       gradient is widened exactly; the output (the fp16 weight) is fp16(w32) rounded
 *       to nearest even (same bits as numpy's astype(float16)).
 *       In place: the momenta (and w32) are declared mutable inputs (setMutateInputs,
 *       MXNet's FMutateInputs); the weights are the outputs, and the Python side passes
 *       out=weights (the same aliasing MXNet's own preloaded_multi_sgd ops use).
 *       defer_weights (a string of num_weights '0'/'1', default all '0'): for a '1'
 *       the output is the weight's momentum m' (the caller passes out=mom; that mom is
 *       then an output, not a mutable input), w32 is still updated in place, and the
 *       weight itself is NOT written -- the caller writes it with an MXNet operator
 *       (w = w + m', or w = w32).  For weights MXNet may hold in an MKLDNN layout, see
 *       the caveat below.
 *
 * Build: python -m yasgd.ops.build (g++ -shared -fPIC -std=c++11 -O3 -fopenmp
 * -ffp-contract=off -march=x86-64-v2, together with the wheel's mxnet/src/lib_api.cc);
 * the hot loops also carry an x86-64-v3 (AVX2) clone chosen at load time.
 *
 * Caveat: outputs must be in MXNet's default layout.  MKLDNN conv/dense kernels re-store
 * float32 weights in an MKLDNN layout after an inference forward, and the next training
 * forward queues the conversion back only when it *executes* -- usually after the
 * update was queued.  MXNet's lib_api dispatcher (c_api.cc CustomFComputeDispatcher)
 * calls NDArray::data() on every output, which fails for such an array ("We can't
 * generate TBlob for MKLDNN data"); nothing here can intervene.  Inputs are fine (the
 * dispatcher hands the operator a default-layout copy -- so writes to a *mutable input*
 * in MKLDNN layout would be silently lost).  Hence defer_weights (used by
 * yasgd/ops/__init__.py for float32 weights of ndim >= 2 on MKLDNN builds).
 *
 * Symbols: the library must export only lib_api's C entry points (yasgd/ops/build.py:
 * version script + -Bsymbolic).  libmxnet.so carries its own copy of lib_api's C++
 * classes, built with GCC 4.8's old std::string ABI, and Horovod makes it RTLD_GLOBAL;
 * with default visibility our references bound to those copies (bus error at load,
 * heap corruption in _opCallFCompute).
 */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"

using namespace mxnet::ext;  // NOLINT

namespace {

typedef std::unordered_map<std::string, std::string> Attrs;

// Elements per work item.  32 Ki floats = 128 KiB: large enough that the OpenMP
// bookkeeping is noise, small enough that ResNet-50's 2.4 M-element layers split
// into ~70 pieces and balance against the 160 small layers.
const int64_t kChunk = 1 << 15;
// Below this many elements in total, stay on the calling thread.
const int64_t kParallelMin = 1 << 16;

// The hot loops are compiled twice: for the portable baseline (-march=x86-64-v2, SSE4.2)
// and for x86-64-v3 (AVX2), chosen once at load time by the dynamic loader (GCC
// target_clones / ifunc), so one .so runs everywhere and uses AVX2 where it exists.
// -ffp-contract=off (build.py) keeps both clones' arithmetic identical (no FMA fusion).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define YASGD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define YASGD_CLONES
#endif
#define YASGD_INLINE inline __attribute__((always_inline))

// ---------------------------------------------------------------- attributes
bool get_attr(const Attrs& a, const char* key, std::string* out) {
  Attrs::const_iterator it = a.find(key);
  if (it == a.end()) return false;
  *out = it->second;
  return true;
}

bool attr_int(const Attrs& a, const char* key, int64_t* out, bool required,
              int64_t dflt) {
  std::string s;
  if (!get_attr(a, key, &s)) {
    if (required) {
      MX_ERROR_MSG << "yasgd ops: missing attribute '" << key << "'";
      return false;
    }
    *out = dflt;
    return true;
  }
  if (s == "True" || s == "true") { *out = 1; return true; }
  if (s == "False" || s == "false") { *out = 0; return true; }
  char* end = nullptr;
  long long v = strtoll(s.c_str(), &end, 10);  // NOLINT
  if (end == s.c_str() || *end != '\0') {
    MX_ERROR_MSG << "yasgd ops: attribute '" << key << "' is not an integer: '" << s << "'";
    return false;
  }
  *out = v;
  return true;
}

bool attr_double(const Attrs& a, const char* key, double* out, double dflt) {
  std::string s;
  if (!get_attr(a, key, &s)) { *out = dflt; return true; }
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') {
    MX_ERROR_MSG << "yasgd ops: attribute '" << key << "' is not a number: '" << s << "'";
    return false;
  }
  *out = v;
  return true;
}

// ---------------------------------------------------------------- float16
// IEEE binary16 <-> binary32 without F16C (x86-64-v2 has none): exact widening,
// round-to-nearest-even narrowing (the same bits as numpy's astype(float16)).
inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// Branch-free select (bit masks, no ?:) so that GCC vectorises the conversion loops.
inline uint32_t sel(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

inline float half_to_float(uint16_t h) {
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent+mantissa
  const uint32_t e = em & 0x0f800000u;
  const uint32_t normal = em + (112u << 23);                     // rebias 15 -> 127
  const uint32_t infnan = em + (224u << 23);                     // exponent all ones
  // subnormal half: let the FPU normalise it (only normal floats involved)
  const uint32_t sub = f_bits(bits_f(em + (113u << 23)) - bits_f(113u << 23));
  const uint32_t mag = sel(e == 0x0f800000u, infnan, sel(e == 0, sub, normal));
  return bits_f(mag | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t float_to_half(float f) {
  // All three cases are computed, then selected.
  const uint32_t bits = f_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t x = bits & 0x7fffffffu;
  // normal: rebias the exponent (127 -> 15), round the mantissa to nearest even; a carry
  // out of the mantissa bumps the exponent, and past 65504 that correctly yields inf
  const uint32_t normal = (x - (112u << 23) + 0xfffu + ((x >> 13) & 1u)) >> 13;
  // subnormal or zero: align the 10 mantissa bits at the bottom with an addition whose
  // round-to-nearest-even does the rounding
  const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t sub = f_bits(bits_f(x) + bits_f(magic)) - magic;
  // |f| >= 65536 or inf: inf; nan: quiet nan.  x < 2^31: signed compares are exact
  const int32_t xs = static_cast<int32_t>(x);
  const uint32_t big = sel(xs > 0x7f800000, 0x7e00u, 0x7c00u);
  const uint32_t o = sel(xs >= 0x47800000, big, sel(xs < 0x38800000, sub, normal));
  return static_cast<uint16_t>(o | sign);
}

template <typename T> struct Load;
template <> struct Load<float> {
  static inline float get(const float* p, int64_t i) { return p[i]; }
  static inline void put(float* p, int64_t i, float v) { p[i] = v; }
};
template <> struct Load<uint16_t> {
  static inline float get(const uint16_t* p, int64_t i) { return half_to_float(p[i]); }
  static inline void put(uint16_t* p, int64_t i, float v) { p[i] = float_to_half(v); }
};

// ---------------------------------------------------------------- work split
struct Task { int arr; int64_t begin, end; };

void split_tasks(const std::vector<int64_t>& sizes, std::vector<Task>* tasks) {
  tasks->clear();
  for (size_t a = 0; a < sizes.size(); ++a) {
    for (int64_t b = 0; b < sizes[a]; b += kChunk) {
      Task t = {static_cast<int>(a), b, b + kChunk < sizes[a] ? b + kChunk : sizes[a]};
      tasks->push_back(t);
    }
  }
}

int threads_for(int64_t total) {
  return total < kParallelMin ? 1 : omp_get_max_threads();
}

bool dtype_ok(int t) { return t == kFloat32 || t == kFloat16; }

// ================================================================= multi_sum_sq
MXReturnValue sumsq_parse(const Attrs& attrs, int* num_in, int* num_out) {
  int64_t n;
  if (!attr_int(attrs, "num_arrays", &n, true, 0)) return MX_FAIL;
  if (n < 1) { MX_ERROR_MSG << "yasgd_multi_sum_sq: num_arrays must be >= 1"; return MX_FAIL; }
  *num_in = static_cast<int>(n);
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue sumsq_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  for (size_t i = 0; i < in->size(); ++i) {
    if (!dtype_ok((*in)[i])) {
      MX_ERROR_MSG << "yasgd_multi_sum_sq: input " << i << " must be float32 or float16";
      return MX_FAIL;
    }
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue sumsq_shape(const Attrs& attrs, std::vector<std::vector<unsigned int> >* in,
                          std::vector<std::vector<unsigned int> >* out) {
  (*out)[0] = std::vector<unsigned int>(1, static_cast<unsigned int>(in->size()));
  return MX_SUCCESS;
}

template <typename T>
YASGD_INLINE double sum_sq_range(const T* p, int64_t b, int64_t e) {
  double s = 0.0;
#pragma omp simd reduction(+:s)
  for (int64_t i = b; i < e; ++i) {
    const double v = Load<T>::get(p, i);
    s += v * v;  // exact square; only the additions round, in double
  }
  return s;
}
YASGD_CLONES double sum_sq_f32(const float* p, int64_t b, int64_t e) {
  return sum_sq_range(p, b, e);
}
YASGD_CLONES double sum_sq_f16(const uint16_t* p, int64_t b, int64_t e) {
  return sum_sq_range(p, b, e);
}

MXReturnValue sumsq_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                            std::vector<MXTensor>* outputs, const OpResource& res) {
  const size_t n = inputs->size();
  std::vector<int64_t> sizes(n);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) { sizes[i] = (*inputs)[i].size(); total += sizes[i]; }
  std::vector<Task> tasks;
  split_tasks(sizes, &tasks);
  std::vector<double> part(tasks.size());
  const int nt = static_cast<int>(tasks.size());
#pragma omp parallel for num_threads(threads_for(total)) schedule(dynamic, 1)
  for (int t = 0; t < nt; ++t) {
    MXTensor& x = (*inputs)[tasks[t].arr];
    part[t] = x.dtype == kFloat16
        ? sum_sq_f16(x.data<uint16_t>(), tasks[t].begin, tasks[t].end)
        : sum_sq_f32(x.data<float>(), tasks[t].begin, tasks[t].end);
  }
  std::vector<double> acc(n, 0.0);  // fixed order: independent of the thread count
  for (int t = 0; t < nt; ++t) acc[tasks[t].arr] += part[t];
  float* out = (*outputs)[0].data<float>();
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i]);
  return MX_SUCCESS;
}

// ================================================================= lars_trust_ratio
MXReturnValue lars_parse(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 4;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue lars_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*in)[i] != kFloat32) {
      MX_ERROR_MSG << "yasgd_lars_trust_ratio: input " << i << " must be float32";
      return MX_FAIL;
    }
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue lars_shape(const Attrs& attrs, std::vector<std::vector<unsigned int> >* in,
                         std::vector<std::vector<unsigned int> >* out) {
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*in)[i].size() != 1 || (*in)[i][0] != (*in)[0][0]) {
      MX_ERROR_MSG << "yasgd_lars_trust_ratio: lrs, w_sq, g_sq, wds must be 1-D, same length";
      return MX_FAIL;
    }
  }
  (*out)[0] = (*in)[0];
  return MX_SUCCESS;
}

MXReturnValue lars_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  double eta, eps, rescale;
  if (!attr_double(attrs, "eta", &eta, 0.001) || !attr_double(attrs, "eps", &eps, 0.0) ||
      !attr_double(attrs, "rescale_grad", &rescale, 1.0)) return MX_FAIL;
  const float* lrs = (*inputs)[0].data<float>();
  const float* wsq = (*inputs)[1].data<float>();
  const float* gsq = (*inputs)[2].data<float>();
  const float* wds = (*inputs)[3].data<float>();
  float* out = (*outputs)[0].data<float>();
  const int64_t n = (*inputs)[0].size();
  for (int64_t i = 0; i < n; ++i) {  // N ~ 161: one thread, microseconds
    const double wn = std::sqrt(static_cast<double>(wsq[i]));
    const double gn = std::sqrt(static_cast<double>(gsq[i]));
    out[i] = (wn > 0.0 && gn > 0.0)
        ? static_cast<float>(lrs[i] * eta * wn / (gn * rescale + wds[i] * wn + eps))
        : lrs[i];
  }
  return MX_SUCCESS;
}

// ================================================================= multi_sgd_mom_update
struct UpdParams {
  int64_t n;
  bool mp;
  int stride;  // inputs per weight: w, g, mom [, w32]
  double momentum, rescale, clip;
  std::vector<char> defer;  // defer[i]: output i is weight i's momentum, w_i is not written
};

bool upd_params(const Attrs& attrs, UpdParams* p) {
  int64_t mp;
  if (!attr_int(attrs, "num_weights", &p->n, true, 0)) return false;
  if (!attr_int(attrs, "multi_precision", &mp, false, 0)) return false;
  if (!attr_double(attrs, "momentum", &p->momentum, 0.0)) return false;
  if (!attr_double(attrs, "rescale_grad", &p->rescale, 1.0)) return false;
  if (!attr_double(attrs, "clip_gradient", &p->clip, -1.0)) return false;
  if (p->n < 1) { MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: num_weights must be >= 1"; return false; }
  p->mp = mp != 0;
  p->stride = p->mp ? 4 : 3;
  p->defer.assign(static_cast<size_t>(p->n), 0);
  std::string mask;
  if (get_attr(attrs, "defer_weights", &mask) && !mask.empty() && mask != "None") {
    if (static_cast<int64_t>(mask.size()) != p->n ||
        mask.find_first_not_of("01") != std::string::npos) {
      MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: defer_weights must be num_weights characters"
                   << " '0'/'1', got '" << mask << "'";
      return false;
    }
    for (int64_t i = 0; i < p->n; ++i) p->defer[i] = mask[i] == '1';
  }
  return true;
}

MXReturnValue upd_parse(const Attrs& attrs, int* num_in, int* num_out) {
  UpdParams p;
  if (!upd_params(attrs, &p)) return MX_FAIL;
  *num_in = static_cast<int>(p.n * p.stride + 2);
  *num_out = static_cast<int>(p.n);
  return MX_SUCCESS;
}

MXReturnValue upd_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  UpdParams p;
  if (!upd_params(attrs, &p)) return MX_FAIL;
  for (int64_t i = 0; i < p.n; ++i) {
    const int w = (*in)[i * p.stride], g = (*in)[i * p.stride + 1];
    const int m = (*in)[i * p.stride + 2];
    if (p.mp) {
      const int w32 = (*in)[i * p.stride + 3];
      if (!dtype_ok(w) || g != w || m != kFloat32 || w32 != kFloat32) {
        MX_ERROR_MSG << "yasgd_multi_sgd_mom_update (multi_precision): weight " << i
                     << ": weight and grad float16 (or float32), mom and weight32 float32";
        return MX_FAIL;
      }
    } else if (w != kFloat32 || g != kFloat32 || m != kFloat32) {
      MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: weight " << i
                   << ": weight, grad, mom must be float32 (use multi_precision for float16)";
      return MX_FAIL;
    }
    (*out)[i] = p.defer[i] ? kFloat32 : w;  // deferred: the output is the momentum
  }
  if ((*in)[p.n * p.stride] != kFloat32 || (*in)[p.n * p.stride + 1] != kFloat32) {
    MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: lrs and wds must be float32";
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

MXReturnValue upd_shape(const Attrs& attrs, std::vector<std::vector<unsigned int> >* in,
                        std::vector<std::vector<unsigned int> >* out) {
  UpdParams p;
  if (!upd_params(attrs, &p)) return MX_FAIL;
  for (int64_t i = 0; i < p.n; ++i) {
    const std::vector<unsigned int>& w = (*in)[i * p.stride];
    for (int j = 1; j < p.stride; ++j) {
      if ((*in)[i * p.stride + j] != w) {
        MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: weight " << i
                     << ": grad/mom/weight32 shape differs from the weight's";
        return MX_FAIL;
      }
    }
    (*out)[i] = w;
  }
  for (int j = 0; j < 2; ++j) {
    const std::vector<unsigned int>& s = (*in)[p.n * p.stride + j];
    if (s.size() != 1 || s[0] != static_cast<unsigned int>(p.n)) {
      MX_ERROR_MSG << "yasgd_multi_sgd_mom_update: lrs and wds must have shape (num_weights,)";
      return MX_FAIL;
    }
  }
  return MX_SUCCESS;
}

MXReturnValue upd_mutate(const Attrs& attrs, std::vector<int>* idx) {
  UpdParams p;
  if (!upd_params(attrs, &p)) return MX_FAIL;
  for (int64_t i = 0; i < p.n; ++i) {
    // a deferred weight's momentum is its output (out=mom), not a mutable input
    if (!p.defer[i]) idx->push_back(static_cast<int>(i * p.stride + 2));  // mom
    if (p.mp) idx->push_back(static_cast<int>(i * p.stride + 3));         // weight32
  }
  return MX_SUCCESS;
}

// One chunk of one layer.  T: storage type of weight/grad/output.  MP: the weight
// read and updated is the fp32 master copy.  WOUT: write the weight output (false for
// a deferred weight: only the momentum, and with MP the master, are written).  Same
// operation order as MXNet's MultiSGDKernel (optimizer_op-inl.h), in float.
// mom_in and mom_out may be the same buffer.
template <typename T, bool MP, bool WOUT>
YASGD_INLINE void upd_range(const T* w_in, const T* g, const float* mom_in, float* mom_out,
                            float* w32, T* w_out, float lr, float wd, float momentum,
                            float rescale, float clip, int64_t b, int64_t e) {
  const float lrwd = lr * wd;
  if (clip > 0.0f) {
    for (int64_t i = b; i < e; ++i) {
      float w = MP ? w32[i] : Load<T>::get(w_in, i);
      float gr = rescale * Load<T>::get(g, i);
      gr = gr > clip ? clip : (gr < -clip ? -clip : gr);
      const float m = momentum * mom_in[i] - lrwd * w - lr * gr;
      mom_out[i] = m;
      w = w + m;
      if (MP) w32[i] = w;
      if (WOUT) Load<T>::put(w_out, i, w);
    }
  } else {
    const float lrr = lr * rescale;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      float w = MP ? w32[i] : Load<T>::get(w_in, i);
      const float m = momentum * mom_in[i] - lrwd * w - lrr * Load<T>::get(g, i);
      mom_out[i] = m;
      w = w + m;
      if (MP) w32[i] = w;
      if (WOUT) Load<T>::put(w_out, i, w);
    }
  }
}

// The five instantiations, each compiled for both targets (see YASGD_CLONES).
YASGD_CLONES void upd_f32(const float* w_in, const float* g, float* mom, float* w_out,
                          float lr, float wd, float mo, float rs, float cl,
                          int64_t b, int64_t e) {
  upd_range<float, false, true>(w_in, g, mom, mom, nullptr, w_out, lr, wd, mo, rs, cl, b, e);
}
YASGD_CLONES void upd_f32_mp(const float* w_in, const float* g, float* mom, float* w32,
                             float* w_out, float lr, float wd, float mo, float rs,
                             float cl, int64_t b, int64_t e) {
  upd_range<float, true, true>(w_in, g, mom, mom, w32, w_out, lr, wd, mo, rs, cl, b, e);
}
YASGD_CLONES void upd_f16_mp(const uint16_t* w_in, const uint16_t* g, float* mom,
                             float* w32, uint16_t* w_out, float lr, float wd, float mo,
                             float rs, float cl, int64_t b, int64_t e) {
  upd_range<uint16_t, true, true>(w_in, g, mom, mom, w32, w_out, lr, wd, mo, rs, cl, b, e);
}
// deferred weights: momentum (and master) only
YASGD_CLONES void upd_f32_defer(const float* w_in, const float* g, const float* mom_in,
                                float* mom_out, float lr, float wd, float mo, float rs,
                                float cl, int64_t b, int64_t e) {
  upd_range<float, false, false>(w_in, g, mom_in, mom_out, nullptr, nullptr, lr, wd, mo, rs,
                                 cl, b, e);
}
YASGD_CLONES void upd_mp_defer(const uint16_t* g16, const float* g32, const float* mom_in,
                               float* mom_out, float* w32, float lr, float wd, float mo,
                               float rs, float cl, int64_t b, int64_t e) {
  if (g16 != nullptr) {
    upd_range<uint16_t, true, false>(nullptr, g16, mom_in, mom_out, w32, nullptr, lr, wd, mo,
                                     rs, cl, b, e);
  } else {
    upd_range<float, true, false>(nullptr, g32, mom_in, mom_out, w32, nullptr, lr, wd, mo,
                                  rs, cl, b, e);
  }
}

MXReturnValue upd_forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  UpdParams p;
  if (!upd_params(attrs, &p)) return MX_FAIL;
  std::vector<MXTensor>& in = *inputs;
  const float* lrs = in[p.n * p.stride].data<float>();
  const float* wds = in[p.n * p.stride + 1].data<float>();
  std::vector<int64_t> sizes(p.n);
  int64_t total = 0;
  for (int64_t i = 0; i < p.n; ++i) { sizes[i] = in[i * p.stride].size(); total += sizes[i]; }
  std::vector<Task> tasks;
  split_tasks(sizes, &tasks);
  const int nt = static_cast<int>(tasks.size());
  const float mo = static_cast<float>(p.momentum), rs = static_cast<float>(p.rescale);
  const float cl = static_cast<float>(p.clip);
#pragma omp parallel for num_threads(threads_for(total)) schedule(dynamic, 1)
  for (int t = 0; t < nt; ++t) {
    const int a = tasks[t].arr;
    MXTensor& w = in[a * p.stride];
    MXTensor& g = in[a * p.stride + 1];
    float* mom = in[a * p.stride + 2].data<float>();
    float* w32 = p.mp ? in[a * p.stride + 3].data<float>() : nullptr;
    MXTensor& o = (*outputs)[a];
    if (p.defer[a] && p.mp) {  // output: the momentum; the master is updated in place
      upd_mp_defer(g.dtype == kFloat16 ? g.data<uint16_t>() : nullptr,
                   g.dtype == kFloat16 ? nullptr : g.data<float>(), mom, o.data<float>(), w32,
                   lrs[a], wds[a], mo, rs, cl, tasks[t].begin, tasks[t].end);
    } else if (p.defer[a]) {  // output: the momentum; the weight is left to the caller
      upd_f32_defer(w.data<float>(), g.data<float>(), mom, o.data<float>(),
                    lrs[a], wds[a], mo, rs, cl, tasks[t].begin, tasks[t].end);
    } else if (w.dtype == kFloat16) {  // only with multi_precision (checked in upd_type)
      upd_f16_mp(w.data<uint16_t>(), g.data<uint16_t>(), mom, w32, o.data<uint16_t>(),
                 lrs[a], wds[a], mo, rs, cl, tasks[t].begin, tasks[t].end);
    } else if (p.mp) {
      upd_f32_mp(w.data<float>(), g.data<float>(), mom, w32, o.data<float>(),
                 lrs[a], wds[a], mo, rs, cl, tasks[t].begin, tasks[t].end);
    } else {
      upd_f32(w.data<float>(), g.data<float>(), mom, o.data<float>(),
              lrs[a], wds[a], mo, rs, cl, tasks[t].begin, tasks[t].end);
    }
  }
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(yasgd_multi_sum_sq)
.setForward(sumsq_forward, "cpu")
.setParseAttrs(sumsq_parse)
.setInferType(sumsq_type)
.setInferShape(sumsq_shape);

REGISTER_OP(yasgd_lars_trust_ratio)
.setForward(lars_forward, "cpu")
.setParseAttrs(lars_parse)
.setInferType(lars_type)
.setInferShape(lars_shape);

REGISTER_OP(yasgd_multi_sgd_mom_update)
.setForward(upd_forward, "cpu")
.setParseAttrs(upd_parse)
.setInferType(upd_type)
.setInferShape(upd_shape)
.setMutateInputs(upd_mutate);

MXReturnValue initialize(int version) {
  if (version >= 10700) return MX_SUCCESS;  // lib_api.h v11 needs MXNet >= 1.7
  MX_ERROR_MSG << "yasgd ops need MXNet >= 1.7, found version " << version;
  return MX_FAIL;
}
