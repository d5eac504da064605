// The memory and communication formulas of sharded data parallelism (sharding_model.h).
#include "mgpu/parallel/sharding/sharding_model.h"

#include <algorithm>

#include "mgpu/error.h"

namespace mgpu::parallel {

namespace {

void check_args(int stage, int world, DType compute) {
  MGPU_CHECK(stage >= 0 && stage <= 3, "sharding model: stage ", stage,
             " (0 = DDP, 1-3 = ZeRO stages)");
  MGPU_CHECK(world >= 1, "sharding model: world size ", world, " (need at least 1 rank)");
  MGPU_CHECK(compute == DType::f32 || compute == DType::bf16 || compute == DType::f16,
             "sharding model: compute dtype ", dtype_name(compute), " (f32, bf16 or f16)");
}

}  // namespace

double bytes_per_parameter(int stage, int world, DType compute_dtype, bool ddp_bucket_copy) {
  check_args(stage, world, compute_dtype);
  const double n = world, c = static_cast<double>(dtype_size(compute_dtype));
  const double master = c < 4 ? 4 : 0;  // a separate fp32 master shard
  switch (stage) {
    case 0: return 16 + (ddp_bucket_copy ? 4 : 0);
    case 1: return c + master / n + c + 4 / n + 8 / n;
    case 2: return c + master / n + 4 / n + 8 / n;
    default: return 16 / n;
  }
}

MemoryPrediction predict_memory(int stage, const std::vector<UnitShape>& units, int world,
                                bool prefetch) {
  MGPU_CHECK(stage >= 1 && stage <= 3, "predict_memory: stage ", stage,
             " (1-3; stage 0, DDP, takes the element counts)");
  for (const UnitShape& u : units) check_args(stage, world, u.compute_dtype);
  const double n = world;
  const std::size_t count = units.size();
  auto numel = [&](std::size_t k) { return k < count ? static_cast<double>(units[k].numel) : 0.0; };
  auto c = [&](std::size_t k) {
    return k < count ? static_cast<double>(dtype_size(units[k].compute_dtype)) : 0.0;
  };
  // Persistent: the table of the header, unit by unit.
  MemoryPrediction m;
  for (std::size_t k = 0; k < count; ++k) {
    const double master = c(k) < 4 ? 4 * numel(k) / n : 0;  // a separate fp32 master shard
    m.params += stage == 3 ? 4 * numel(k) / n : c(k) * numel(k) + master;
    m.grads += (stage == 1 ? c(k) * numel(k) : 0) + 4 * numel(k) / n;
    m.optimizer_state += 8 * numel(k) / n;
  }
  // The working set, unit by unit in backward order (k = last .. 0), as the schedule runs:
  // unit k's gradients G_k and reduce-scatter output R_k appear while k computes, unit k+1's
  // are freed only after k computed (so its reduction overlapped k's compute); at stage 3
  // unit k's parameters P_k and the prefetched P_{k-1} are there too. Adding a reduced
  // chunk to an fp32 master gradient needs an fp32 copy of it first when c < 4 (T).
  auto P = [&](std::size_t k) { return c(k) * numel(k); };
  auto G = P;  // a unit's full gradient has its parameters' size and dtype
  auto R = [&](std::size_t k) { return stage >= 2 ? P(k) / n : 0.0; };
  auto T = [&](std::size_t k) { return c(k) > 0 && c(k) < 4 ? 4 * numel(k) / n : 0.0; };
  double worst = 0;
  for (std::size_t k = 0; k < count; ++k) {
    if (stage == 1) {
      worst = std::max(worst, T(k));
      continue;
    }
    // stage 3: unit k's parameters and the prefetched k-1's
    const double prev = stage == 3 && prefetch && k > 0 ? P(k - 1) : 0.0;
    const double own = stage == 3 ? P(k) : 0.0;
    const double reducing = G(k) + R(k) + G(k + 1) + R(k + 1);
    // while k computes and right after its reduction is launched; then, with P_k freed,
    // while k+1's reduction is finished
    worst = std::max({worst, own + prev + reducing, prev + reducing + T(k + 1)});
    // forward at stage 3: unit k and the prefetched k+1
    if (stage == 3) worst = std::max(worst, P(k) + (prefetch ? P(k + 1) : 0.0));
  }
  // unit 0's reduction is finished last, alone
  if (stage >= 2 && count > 0) worst = std::max(worst, G(0) + R(0) + T(0));
  m.working_set = worst;
  return m;
}

MemoryPrediction predict_memory(int stage, const std::vector<std::int64_t>& unit_numel, int world,
                                DType compute_dtype, bool prefetch, bool ddp_bucket_copy) {
  check_args(stage, world, compute_dtype);
  if (stage > 0) {
    std::vector<UnitShape> units;
    for (std::int64_t u : unit_numel) units.push_back(UnitShape{u, compute_dtype});
    return predict_memory(stage, units, world, prefetch);
  }
  // DDP: fp32 weights, gradients (and bucket copies), two moments, on every rank.
  double total = 0;
  for (std::int64_t u : unit_numel) total += static_cast<double>(u);
  MemoryPrediction m;
  m.params = 4 * total;
  m.grads = 4 * total + (ddp_bucket_copy ? 4 * total : 0);
  m.optimizer_state = 8 * total;
  return m;
}

double ring_messages(const std::string& op, int world) {
  MGPU_CHECK(world >= 1, "ring_messages: world size ", world);
  if (op == "all-reduce") return 2.0 * (world - 1);
  MGPU_CHECK(op == "reduce-scatter" || op == "all-gather", "ring_messages: unknown op '", op,
             "' (all-reduce, reduce-scatter or all-gather)");
  return world - 1.0;
}

double ring_bytes_sent(const std::string& op, double bytes, int world) {
  // Each message carries one of the N chunks: M/N bytes.
  return ring_messages(op, world) * bytes / world;
}

CommPrediction predict_comm(int stage, const std::vector<std::int64_t>& unit_numel, int world,
                            DType compute_dtype) {
  check_args(stage, world, compute_dtype);
  const double c = static_cast<double>(dtype_size(compute_dtype));
  std::vector<const char*> ops;
  switch (stage) {
    case 0: ops = {"all-reduce"}; break;
    case 1: ops = {"all-reduce", "all-gather"}; break;
    case 2: ops = {"reduce-scatter", "all-gather"}; break;
    default: ops = {"all-gather", "all-gather", "reduce-scatter"}; break;
  }
  // DDP reduces fp32 gradients (autocast keeps them fp32).
  const double bytes_per_element = stage == 0 ? 4.0 : c;
  CommPrediction p;
  for (std::int64_t u : unit_numel) {
    if (u == 0) continue;
    for (const char* op : ops) {
      p.bytes_sent += ring_bytes_sent(op, bytes_per_element * static_cast<double>(u), world);
      p.messages += ring_messages(op, world);
    }
  }
  return p;
}

}  // namespace mgpu::parallel
