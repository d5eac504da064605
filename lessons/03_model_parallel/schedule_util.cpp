// What every schedule shares: reading it per stage, its idle fraction, drawing it,
// checking it, and 1F1B on the clock (each stage's order of task 4 on the library's clock).
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "pipeline.h"

namespace mgpu::lesson03 {

std::vector<PipeOp> Schedule::stage_ops(int k) const {
  std::vector<PipeOp> ops;
  for (const auto& row : ticks)
    if (row.at(static_cast<std::size_t>(k))) ops.push_back(*row[k]);
  return ops;
}

double Schedule::idle_fraction() const {
  std::size_t idle = 0, slots = 0;
  for (const auto& row : ticks)
    for (const auto& cell : row) {
      ++slots;
      idle += !cell;
    }
  return slots ? static_cast<double>(idle) / static_cast<double>(slots) : 0.0;
}

std::string Schedule::draw() const {
  const std::size_t width = PipeOp{Pass::backward, std::max(0, num_micro - 1)}.str().size() + 1;
  std::ostringstream os;
  for (int k = 0; k < num_stages; ++k) {
    os << "stage " << k << " ";
    for (const auto& row : ticks) {
      std::string cell = row[k] ? row[k]->str() : ".";
      os << cell << std::string(width - cell.size(), ' ');
    }
    os << "\n";
  }
  return os.str();
}

Schedule one_f_one_b_schedule(int num_stages, int num_micro) {
  const int K = num_stages, M = num_micro;
  MGPU_CHECK(K >= 1 && M >= 1, "one_f_one_b_schedule: need K >= 1 and M >= 1, got K = ", K,
             ", M = ", M);
  std::vector<std::vector<PipeOp>> orders;
  for (int k = 0; k < K; ++k) orders.push_back(one_f_one_b_order(K, M, k));
  // The library's clock places each op at the earliest tick its input allows (and names the
  // ops that wait forever, should the orders deadlock); its rows are stages, a Schedule's
  // rows are ticks.
  const parallel::pp::Timeline clock = parallel::pp::simulate(orders, K, 1, M);
  Schedule s;
  s.name = "1f1b";
  s.num_stages = K;
  s.num_micro = M;
  s.ticks.assign(static_cast<std::size_t>(clock.span()),
                 std::vector<std::optional<PipeOp>>(static_cast<std::size_t>(K)));
  for (std::size_t t = 0; t < s.ticks.size(); ++t)
    for (std::size_t k = 0; k < s.ticks[t].size(); ++k) s.ticks[t][k] = clock.slots[k][t];
  return s;
}

int max_in_flight(const Schedule& s, int k) {
  int held = 0, most = 0;
  for (const PipeOp& op : s.stage_ops(k)) {
    held += op.pass == Pass::forward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

void check_schedule(const Schedule& s) {
  const int K = s.num_stages, M = s.num_micro;
  std::map<std::tuple<int, int, int>, int> at;  // (kind, micro, stage) -> tick
  for (std::size_t t = 0; t < s.ticks.size(); ++t) {
    MGPU_CHECK(static_cast<int>(s.ticks[t].size()) == K, s.name, ": tick ", t, " has ",
               s.ticks[t].size(), " stages, expected ", K);
    for (int k = 0; k < K; ++k) {
      if (!s.ticks[t][k]) continue;
      const PipeOp& op = *s.ticks[t][k];
      MGPU_CHECK(op.micro >= 0 && op.micro < M, s.name, ": tick ", t, " stage ", k,
                 " names micro-batch ", op.micro, " of ", M);
      const bool fresh = at.emplace(std::make_tuple(static_cast<int>(op.pass), op.micro, k),
                                    static_cast<int>(t)).second;
      MGPU_CHECK(fresh, s.name, ": ", op.str(), " runs twice on stage ", k);
    }
  }
  auto tick_of = [&](Pass kind, int m, int k) {
    auto it = at.find({static_cast<int>(kind), m, k});
    MGPU_CHECK(it != at.end(), s.name, ": ", PipeOp{kind, m}.str(), " never runs on stage ", k);
    return it->second;
  };
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const int f = tick_of(Pass::forward, m, k), b = tick_of(Pass::backward, m, k);
      if (k > 0)
        MGPU_CHECK(f > tick_of(Pass::forward, m, k - 1), s.name, ": F", m, " on stage ", k,
                   " (tick ", f, ") runs before its input exists");
      const int needed = k == K - 1 ? f : tick_of(Pass::backward, m, k + 1);
      MGPU_CHECK(b > needed, s.name, ": B", m, " on stage ", k, " (tick ", b,
                 ") runs before its gradient exists (tick ", needed, ")");
    }
}

std::vector<std::size_t> balanced_boundaries(nn::Sequential& model, int num_stages) {
  const std::size_t n = model.size();
  MGPU_CHECK(num_stages >= 1 && static_cast<std::size_t>(num_stages) <= n, "balanced_boundaries: ",
             num_stages, " stages need at least as many layers; the model has ", n);
  std::vector<double> prefix(n + 1, 0.0);  // parameters in layers [0, i)
  for (std::size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + static_cast<double>(model.at(i)->num_parameters());
  std::vector<std::size_t> cuts;
  std::size_t prev = 0;
  for (int k = 1; k < num_stages; ++k) {
    const double target = prefix[n] * k / num_stages;
    // The cut closest to the target, leaving a layer for this stage and every later one.
    const std::size_t lo = prev + 1, hi = n - static_cast<std::size_t>(num_stages - k);
    std::size_t best = lo;
    for (std::size_t c = lo; c <= hi; ++c)
      if (std::abs(prefix[c] - target) < std::abs(prefix[best] - target)) best = c;
    // Keep parameter-free layers (ReLU, Flatten) with the layer before them.
    while (best < hi && model.at(best)->num_parameters() == 0) ++best;
    cuts.push_back(best);
    prev = best;
  }
  return cuts;
}

}  // namespace mgpu::lesson03
