// The context-parallel attention core: ring attention (tasks 3 and 4 of lesson 14), the
// all-gather baseline, Ulysses (task 5) or the ring x Ulysses hybrid, with what lesson 14's
// program measures of it.
#include "mgpu/parallel/cp/ring_attention_core.h"

#include <time.h>

#include <algorithm>
#include <initializer_list>

#include "mgpu/allocator.h"
#include "mgpu/error.h"

namespace mgpu::parallel::cp {
namespace {

// CPU seconds of the calling thread: unlike the wall clock, not stretched by other
// processes sharing the cores.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The bytes of the tensors a forward keeps (undefined ones hold none).
std::size_t bytes_of(std::initializer_list<const Tensor*> kept) {
  std::size_t n = 0;
  for (const Tensor* t : kept) n += t->defined() ? t->nbytes() : 0;
  return n;
}

}  // namespace

const char* core_kind_name(CoreKind kind) {
  switch (kind) {
    case CoreKind::allgather: return "allgather";
    case CoreKind::ulysses: return "ulysses";
    case CoreKind::hybrid: return "hybrid";
    case CoreKind::ring: break;
  }
  return "ring";
}

RingAttentionCore::RingAttentionCore(dist::ProcessGroup& group, Split split, bool allgather)
    : RingAttentionCore(group, split, allgather ? CoreKind::allgather : CoreKind::ring) {}

RingAttentionCore::RingAttentionCore(dist::ProcessGroup& group, Split split, CoreKind kind,
                                     std::int64_t heads, HybridGroups hybrid)
    : group_(&group), split_(split), kind_(kind), heads_(heads), hybrid_(std::move(hybrid)) {
  if (kind_ == CoreKind::ulysses) heads_per_rank(heads_, group_->size());  // refused here, once
  if (kind_ == CoreKind::hybrid) {
    MGPU_CHECK(hybrid_.ulysses && hybrid_.ring && hybrid_.U * hybrid_.R == group_->size(),
               "RingAttentionCore: the hybrid needs its Ulysses and ring groups within the CP "
               "group of ", group_->size(), " ranks (new_hybrid_groups)");
    heads_per_rank(heads_, hybrid_.U);
  }
}

std::string RingAttentionCore::describe() const {
  const char* name = kind_ == CoreKind::allgather ? "all-gather K/V"
                     : kind_ == CoreKind::ulysses ? "Ulysses"
                     : kind_ == CoreKind::hybrid ? "hybrid" : "ring";
  std::string s = std::string(name) + " attention over " + std::to_string(group_->size()) + " rank(s)";
  if (kind_ == CoreKind::hybrid)
    s += " (Ulysses " + std::to_string(hybrid_.U) + " x ring " + std::to_string(hybrid_.R) + ")";
  return s + ", " + split_name(split_);
}

Tensor RingAttentionCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, bool training) {
  // The core's own peak: what it allocates beyond its inputs while it runs (blocks in
  // flight, or the gathered K and V), its result included. Measuring it resets the
  // process's peak, so the peak found before is carried.
  const Device dev = q.device();
  stats_.carried_peak = std::max(stats_.carried_peak, memory_stats(dev).peak_allocated);
  const std::size_t before = memory_stats(dev).allocated;
  reset_peak_memory(dev);
  const double c0 = thread_cpu_s();
  if (kind_ == CoreKind::ulysses) {
    UlyssesForward u = ulysses_attention_forward(q, k, v, heads_, split_, true, *group_);
    stats_.cpu_s += thread_cpu_s() - c0;
    stats_.peak = std::max(stats_.peak, memory_stats(dev).peak_allocated - before);
    stats_.work = u.work;
    Tensor y = std::move(u.out);
    u.out = Tensor();
    if (training) {
      stats_.kept = bytes_of({&u.q, &u.k, &u.v, &u.result.out, &u.result.lse});
      saved_.push(describe(), Saved{Tensor(), Tensor(), Tensor(), CpForward(), std::move(u), HybridForward()});
    }
    return y;
  }
  if (kind_ == CoreKind::hybrid) {
    HybridForward h = hybrid_attention_forward(q, k, v, heads_, split_, true, hybrid_);
    stats_.cpu_s += thread_cpu_s() - c0;
    stats_.peak = std::max(stats_.peak, memory_stats(dev).peak_allocated - before);
    stats_.work = h.work;
    Tensor y = std::move(h.out);
    h.out = Tensor();
    if (training) {
      stats_.kept = bytes_of({&h.q, &h.k, &h.v, &h.ring.result.out, &h.ring.result.lse});
      saved_.push(describe(), Saved{Tensor(), Tensor(), Tensor(), CpForward(), UlyssesForward(), std::move(h)});
    }
    return y;
  }
  CpForward f = kind_ == CoreKind::allgather
                    ? allgather_attention_forward(q, k, v, split_, true, *group_)
                    : ring_attention_forward(q, k, v, split_, true, *group_);
  stats_.cpu_s += thread_cpu_s() - c0;
  stats_.peak = std::max(stats_.peak, memory_stats(dev).peak_allocated - before);
  stats_.work = f.work;
  Tensor y = std::move(f.out);
  f.out = Tensor();
  if (training) {
    stats_.kept = bytes_of({&q, &k, &v, &f.result.out, &f.result.lse});
    saved_.push(describe(), Saved{q, k, v, std::move(f), UlyssesForward(), HybridForward()});
  }
  return y;
}

nn::AttentionGrads RingAttentionCore::backward(const Tensor& grad_y) {
  const Saved s = saved_.pop(describe());
  const double c0 = thread_cpu_s();
  nn::AttentionGrads g =
      kind_ == CoreKind::ulysses
          ? ulysses_attention_backward(grad_y, s.u, heads_, split_, true, *group_)
      : kind_ == CoreKind::hybrid
          ? hybrid_attention_backward(grad_y, s.h, heads_, split_, true, hybrid_)
      : kind_ == CoreKind::allgather
          ? allgather_attention_backward(grad_y, s.q, s.k, s.v, s.f, split_, true, *group_)
          : ring_attention_backward(grad_y, s.q, s.k, s.v, s.f, split_, true, *group_);
  stats_.cpu_s += thread_cpu_s() - c0;
  return g;
}

std::shared_ptr<AttentionCore> RingAttentionCore::clone() const {
  return std::make_shared<RingAttentionCore>(*group_, split_, kind_, heads_, hybrid_);
}

}  // namespace mgpu::parallel::cp
