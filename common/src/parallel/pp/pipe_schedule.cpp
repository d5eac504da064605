// Pipeline schedules as per-rank orders, their check, and the clock that counts their bubble
// (the 1F1B and interleaved orders are lessons 03's and 15's: mgpu/parallel/pp/pipe_schedule.h).
#include "mgpu/parallel/pp/pipe_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "mgpu/error.h"

namespace mgpu::parallel::pp {

namespace {

void check_sizes(const char* what, int p, int v, int m, int rank) {
  MGPU_CHECK(p >= 1 && v >= 1 && m >= 1 && rank >= 0 && rank < p, what, ": rank ", rank, " of ",
             p, " pipeline rank(s), ", v, " chunk(s) each, ", m,
             " micro-batch(es): need p, v, m >= 1 and 0 <= rank < p");
}

}  // namespace

std::string PipeOp::str(int v) const {
  std::ostringstream s;
  s << (pass == Pass::forward ? 'F' : 'B') << micro;
  if (v > 1) s << '.' << chunk;
  return s.str();
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  MGPU_FAIL("unknown pipeline schedule '", name, "' (gpipe, 1f1b or interleaved)");
}

std::vector<PipeOp> gpipe_order(int p, int m, int rank) {
  check_sizes("gpipe_order", p, 1, m, rank);
  std::vector<PipeOp> order;
  for (int j = 0; j < m; ++j) order.push_back({Pass::forward, j, 0});
  for (int j = m; j-- > 0;) order.push_back({Pass::backward, j, 0});
  return order;
}

std::vector<PipeOp> schedule_order(ScheduleKind kind, int p, int v, int m, int rank) {
  MGPU_CHECK(kind == ScheduleKind::interleaved || v == 1, "the ", schedule_name(kind),
             " schedule has one model chunk per rank; --virtual ", v, " needs interleaved");
  switch (kind) {
    case ScheduleKind::gpipe: return gpipe_order(p, m, rank);
    case ScheduleKind::one_f_one_b: return one_f_one_b_order(p, m, rank);
    case ScheduleKind::interleaved: return interleaved_order(p, v, m, rank);
  }
  return {};
}

void check_orders(const std::vector<std::vector<PipeOp>>& orders, int p, int v, int m) {
  MGPU_CHECK(static_cast<int>(orders.size()) == p, "check_orders: ", orders.size(),
             " order(s) for ", p, " pipeline rank(s)");
  for (int r = 0; r < p; ++r) {
    const auto& order = orders[static_cast<std::size_t>(r)];
    MGPU_CHECK(static_cast<int>(order.size()) == 2 * m * v, "rank ", r, " runs ", order.size(),
               " op(s); a schedule of ", m, " micro-batch(es) through ", v,
               " chunk(s) has 2·m·v = ", 2 * m * v);
    std::set<std::tuple<int, int, int>> seen;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const PipeOp& o = order[i];
      MGPU_CHECK(o.micro >= 0 && o.micro < m && o.chunk >= 0 && o.chunk < v, "rank ", r, ", op ",
                 i, ": ", o.str(v), " names micro-batch ", o.micro, " / chunk ", o.chunk,
                 " outside ", m, " micro-batch(es) and ", v, " chunk(s)");
      MGPU_CHECK(seen.insert({static_cast<int>(o.pass), o.micro, o.chunk}).second, "rank ", r,
                 ", op ", i, ": ", o.str(v), " runs twice");
      if (o.pass == Pass::backward)
        MGPU_CHECK(seen.count({static_cast<int>(Pass::forward), o.micro, o.chunk}) == 1, "rank ",
                   r, ", op ", i, ": ", o.str(v), " runs before its forward (the backward needs "
                   "the activations the forward keeps)");
    }
  }
}

long Timeline::idle_slots() const {
  long idle = 0;
  for (const auto& row : slots)
    for (const auto& s : row) idle += s ? 0 : 1;
  return idle;
}

long Timeline::busy_slots() const {
  long busy = 0;
  for (const auto& row : slots)
    for (const auto& s : row) busy += s ? 1 : 0;
  return busy;
}

std::string Timeline::draw() const {
  std::size_t width = 2;
  for (const auto& row : slots)
    for (const auto& s : row)
      if (s) width = std::max(width, s->str(v).size());
  std::ostringstream out;
  for (std::size_t r = 0; r < slots.size(); ++r) {
    out << "rank " << r << " ";
    for (const auto& s : slots[r]) {
      std::string cell = s ? s->str(v) : ".";
      cell.resize(width + 1, ' ');
      out << cell;
    }
    out << "\n";
  }
  return out.str();
}

Timeline simulate(const std::vector<std::vector<PipeOp>>& orders, int p, int v, int m) {
  check_orders(orders, p, v, m);
  const int S = p * v;
  // done[pass][micro][virtual stage]: the tick the op ran at, or -1.
  std::vector<int> done(static_cast<std::size_t>(2 * m * S), -1);
  auto at = [&](Pass pass, int micro, int stage) -> int& {
    return done[static_cast<std::size_t>((static_cast<int>(pass) * m + micro) * S + stage)];
  };
  Timeline t;
  t.p = p;
  t.v = v;
  t.m = m;
  t.slots.assign(static_cast<std::size_t>(p), {});
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::size_t remaining = static_cast<std::size_t>(2 * m * v * p);
  for (int tick = 0; remaining > 0; ++tick) {
    bool ran = false;
    for (int r = 0; r < p; ++r) {
      auto& row = t.slots[static_cast<std::size_t>(r)];
      row.push_back(std::nullopt);
      const auto& order = orders[static_cast<std::size_t>(r)];
      std::size_t& i = next[static_cast<std::size_t>(r)];
      if (i == order.size()) continue;
      const PipeOp& o = order[i];
      const int s = virtual_stage(p, r, o.chunk);
      int input = -1;  // the tick its input was made at; -1: not yet
      if (o.pass == Pass::forward)
        input = s == 0 ? -2 : at(Pass::forward, o.micro, s - 1);
      else
        input = s == S - 1 ? at(Pass::forward, o.micro, s) : at(Pass::backward, o.micro, s + 1);
      if (input == -1 || input >= tick) continue;
      at(o.pass, o.micro, s) = tick;
      row.back() = o;
      ++i;
      --remaining;
      ran = true;
    }
    if (!ran && remaining > 0) {
      std::ostringstream waiting;
      for (int r = 0; r < p; ++r) {
        const std::size_t i = next[static_cast<std::size_t>(r)];
        if (i < orders[static_cast<std::size_t>(r)].size())
          waiting << " rank " << r << " waits to run " << orders[static_cast<std::size_t>(r)][i].str(v)
                  << ";";
      }
      MGPU_FAIL("the pipeline schedule deadlocks at tick ", tick, ":", waiting.str(),
                " none of their inputs can ever come (a dependency across ranks runs later in "
                "its rank's order than the op that needs it)");
    }
  }
  return t;
}

}  // namespace mgpu::parallel::pp
