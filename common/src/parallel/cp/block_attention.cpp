// The per-block kernels of context-parallel attention: one block of queries against one
// block of keys and values, forward (a partial result the online softmax merges) and
// backward (FlashAttention's recurrence: the probabilities rebuilt from the final lse).
// They run on the host in f64 whatever the inputs' dtype and device.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mgpu/copy.h"
#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Tensor host_f64(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  return h.dtype() == DType::f64 ? h : h.to(DType::f64);
}

// The chunks of a block of n rows, [begin, end) each.
std::vector<std::pair<std::int64_t, std::int64_t>> chunks_of(std::int64_t n, std::int64_t chunk) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const std::int64_t step = chunk > 0 ? chunk : std::max<std::int64_t>(n, 1);
  for (std::int64_t b = 0; b < n; b += step) out.emplace_back(b, std::min(n, b + step));
  return out;
}

// True when key chunk [kb, ke) lies wholly after query chunk [qb, qe).
bool chunk_skipped(const std::vector<std::int64_t>& q_pos, std::int64_t qb, std::int64_t qe,
                   const std::vector<std::int64_t>& k_pos, std::int64_t kb, std::int64_t ke,
                   bool causal) {
  if (!causal) return false;
  const std::int64_t q_last = *std::max_element(q_pos.begin() + qb, q_pos.begin() + qe);
  const std::int64_t k_first = *std::min_element(k_pos.begin() + kb, k_pos.begin() + ke);
  return k_first > q_last;
}

void check_positions(const char* op, const Tensor& q, const Tensor& k,
                     const std::vector<std::int64_t>& q_pos,
                     const std::vector<std::int64_t>& k_pos) {
  MGPU_CHECK(q.ndim() == 3 && k.ndim() == 3 && q.size(0) == k.size(0) && q.size(2) == k.size(2),
             op, ": q ", q.str(), " and k ", k.str(), " are not [BH, Tq, D] and [BH, Tk, D]");
  MGPU_CHECK(static_cast<std::int64_t>(q_pos.size()) == q.size(1) &&
                 static_cast<std::int64_t>(k_pos.size()) == k.size(1),
             op, ": ", q_pos.size(), " query and ", k_pos.size(), " key positions for ", q.str(),
             " and ", k.str());
}

}  // namespace

const char* split_name(Split split) { return split == Split::zigzag ? "zigzag" : "plain"; }

std::int64_t chunk_rows(std::int64_t T, int P, Split split) {
  return split == Split::zigzag ? T / (2 * P) : T / P;
}

Tensor zeros_f64(const Tensor& like) { return Tensor::zeros(like.shape(), DType::f64); }

PartialAttention empty_partial(std::int64_t BH, std::int64_t Tq, std::int64_t D) {
  return {Tensor::zeros({BH, Tq, D}, DType::f64), Tensor::full({BH, Tq}, kNegInf, DType::f64)};
}

void check_cp_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  MGPU_CHECK(q.ndim() == 3 && q.shape() == k.shape() && q.shape() == v.shape(), op,
             ": q, k, v must be [BH, T/P, D] alike, got ", q.str(), ", ", k.str(), ", ", v.str());
  MGPU_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && q.device() == k.device() &&
                 q.device() == v.device(),
             op, ": q, k, v must share one dtype and device: ", q.str(), ", ", k.str(), ", ",
             v.str());
}

bool block_skipped(const std::vector<std::int64_t>& q_pos, const std::vector<std::int64_t>& k_pos,
                   bool causal) {
  if (q_pos.empty() || k_pos.empty()) return true;
  return chunk_skipped(q_pos, 0, static_cast<std::int64_t>(q_pos.size()), k_pos, 0,
                       static_cast<std::int64_t>(k_pos.size()), causal);
}

PartialAttention block_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const std::vector<std::int64_t>& q_pos,
                                 const std::vector<std::int64_t>& k_pos, bool causal,
                                 std::int64_t chunk, std::int64_t* work) {
  check_positions("block_attention", q, k, q_pos, k_pos);
  check_same_shape("block_attention", k, v);
  const std::int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  const Tensor qh = host_f64(q), kh = host_f64(k), vh = host_f64(v);
  const double* Q = qh.data<double>();
  const double* K = kh.data<double>();
  const double* V = vh.data<double>();
  PartialAttention part = empty_partial(BH, Tq, D);
  double* O = part.out.data<double>();
  double* L = part.lse.data<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q_chunks = chunks_of(Tq, chunk), k_chunks = chunks_of(Tk, chunk);
  std::vector<double> s(static_cast<std::size_t>(Tk));
  std::vector<char> use(static_cast<std::size_t>(Tk));
  for (const auto& [qb, qe] : q_chunks) {
    // The key chunks this query chunk computes (the same for every head).
    std::fill(use.begin(), use.end(), 0);
    for (const auto& [kb, ke] : k_chunks) {
      if (chunk_skipped(q_pos, qb, qe, k_pos, kb, ke, causal)) continue;
      std::fill(use.begin() + kb, use.begin() + ke, 1);
      if (work) *work += (qe - qb) * (ke - kb);
    }
    for (std::int64_t h = 0; h < BH; ++h) {
      for (std::int64_t i = qb; i < qe; ++i) {
        const double* qi = Q + (h * Tq + i) * D;
        double m = kNegInf;
        for (std::int64_t j = 0; j < Tk; ++j) {
          s[j] = kNegInf;
          if (!use[j] || (causal && k_pos[j] > q_pos[i])) continue;
          const double* kj = K + (h * Tk + j) * D;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        if (m == kNegInf) continue;  // no key of this block is visible: lse stays -inf
        double l = 0;
        double* oi = O + (h * Tq + i) * D;
        for (std::int64_t j = 0; j < Tk; ++j) {
          if (s[j] == kNegInf) continue;
          const double p = std::exp(s[j] - m);
          l += p;
          const double* vj = V + (h * Tk + j) * D;
          for (std::int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
        }
        for (std::int64_t d = 0; d < D; ++d) oi[d] /= l;
        L[h * Tq + i] = m + std::log(l);
      }
    }
  }
  return part;
}

void block_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const std::vector<std::int64_t>& q_pos,
                              const std::vector<std::int64_t>& k_pos,
                              const PartialAttention& fwd, bool causal, std::int64_t chunk,
                              Tensor& dq, Tensor& dk, Tensor& dv) {
  check_positions("block_attention_backward", q, k, q_pos, k_pos);
  check_same_shape("block_attention_backward", dout, q);
  check_same_shape("block_attention_backward", fwd.out, q);
  const std::int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  MGPU_CHECK(dq.dtype() == DType::f64 && dk.dtype() == DType::f64 && dv.dtype() == DType::f64 &&
                 dq.device().is_cpu() && dk.device().is_cpu() && dv.device().is_cpu(),
             "block_attention_backward: dq, dk, dv must be f64 on the host");
  check_same_shape("block_attention_backward", dq, q);
  check_same_shape("block_attention_backward", dk, k);
  check_same_shape("block_attention_backward", dv, v);
  const Tensor qh = host_f64(q), kh = host_f64(k), vh = host_f64(v), gh = host_f64(dout);
  const double* Q = qh.data<double>();
  const double* K = kh.data<double>();
  const double* V = vh.data<double>();
  const double* G = gh.data<double>();
  const double* O = fwd.out.data<double>();
  const double* L = fwd.lse.data<double>();
  double* dQ = dq.data<double>();
  double* dK = dk.data<double>();
  double* dV = dv.data<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q_chunks = chunks_of(Tq, chunk), k_chunks = chunks_of(Tk, chunk);
  std::vector<char> use(static_cast<std::size_t>(Tk));
  for (const auto& [qb, qe] : q_chunks) {
    std::fill(use.begin(), use.end(), 0);
    bool any = false;
    for (const auto& [kb, ke] : k_chunks) {
      if (chunk_skipped(q_pos, qb, qe, k_pos, kb, ke, causal)) continue;
      std::fill(use.begin() + kb, use.begin() + ke, 1);
      any = true;
    }
    if (!any) continue;
    for (std::int64_t h = 0; h < BH; ++h) {
      for (std::int64_t i = qb; i < qe; ++i) {
        const double lse = L[h * Tq + i];
        if (lse == -std::numeric_limits<double>::infinity()) continue;
        const double* qi = Q + (h * Tq + i) * D;
        const double* gi = G + (h * Tq + i) * D;
        const double* oi = O + (h * Tq + i) * D;
        double delta = 0;  // Σ_d dout·out: the softmax backward's row term
        for (std::int64_t d = 0; d < D; ++d) delta += gi[d] * oi[d];
        double* dqi = dQ + (h * Tq + i) * D;
        for (std::int64_t j = 0; j < Tk; ++j) {
          if (!use[j] || (causal && k_pos[j] > q_pos[i])) continue;
          const double* kj = K + (h * Tk + j) * D;
          const double* vj = V + (h * Tk + j) * D;
          double dot = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            dot += qi[d] * kj[d];
            dp += gi[d] * vj[d];
          }
          const double p = std::exp(dot * scale - lse);
          const double ds = p * (dp - delta) * scale;
          double* dkj = dK + (h * Tk + j) * D;
          double* dvj = dV + (h * Tk + j) * D;
          for (std::int64_t d = 0; d < D; ++d) {
            dvj[d] += p * gi[d];
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
          }
        }
      }
    }
  }
}

std::int64_t causal_work(std::int64_t T, int P, int rank, Split split) {
  const std::int64_t c = chunk_rows(T, P, split);
  return split == Split::zigzag ? (2 * P + 1) * c * c : (rank + 1) * c * c;
}

}  // namespace mgpu::parallel::cp
