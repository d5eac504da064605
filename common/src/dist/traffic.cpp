// What a group counts of its ops (traffic.h): each op as it is issued, from the tensors it
// was handed, on the thread that issues it.
#include "mgpu/dist/traffic.h"

#include <cstdio>

#include "group_base.h"

namespace mgpu::dist {
namespace {

// Every kind but recv with its printed name, in the order str() lists them.
struct TrafficKind {
  OpTraffic Traffic::*member;
  const char* name;
};
constexpr TrafficKind kSent[] = {{&Traffic::all_to_all, "all-to-all"}, {&Traffic::send, "send"},
                          {&Traffic::all_gather, "all-gather"},
                          {&Traffic::reduce_scatter, "reduce-scatter"},
                          {&Traffic::all_reduce, "all-reduce"}, {&Traffic::broadcast, "broadcast"},
                          {&Traffic::reduce, "reduce"}, {&Traffic::barrier, "barrier"}};

std::string traffic_kib(std::int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

}  // namespace

std::int64_t Traffic::sent_bytes() const {
  std::int64_t n = 0;
  for (const TrafficKind& k : kSent) n += (this->*k.member).bytes;
  return n;
}

Traffic& Traffic::operator+=(const Traffic& other) {
  for (const TrafficKind& k : kSent) {
    (this->*k.member).ops += (other.*k.member).ops;
    (this->*k.member).bytes += (other.*k.member).bytes;
  }
  recv.ops += other.recv.ops;
  recv.bytes += other.recv.bytes;
  return *this;
}

Traffic Traffic::operator-(const Traffic& before) const {
  Traffic out = *this;
  for (const TrafficKind& k : kSent) {
    (out.*k.member).ops -= (before.*k.member).ops;
    (out.*k.member).bytes -= (before.*k.member).bytes;
  }
  out.recv.ops -= before.recv.ops;
  out.recv.bytes -= before.recv.bytes;
  return out;
}

std::string Traffic::str() const {
  std::string s;
  for (const TrafficKind& k : kSent) {
    const OpTraffic& o = this->*k.member;
    if (o.ops == 0) continue;
    if (!s.empty()) s += ", ";
    s += std::string(k.name) + " " + std::to_string(o.ops) + ": " + traffic_kib(o.bytes);
  }
  if (s.empty()) return "none";
  s += " (sent " + traffic_kib(sent_bytes());
  if (recv.ops > 0) s += "; recv " + std::to_string(recv.ops) + ": " + traffic_kib(recv.bytes);
  return s + ")";
}

namespace detail {

Traffic BackendGroup::traffic() const {
  std::lock_guard<std::mutex> lock(traffic_mutex_);
  return traffic_;
}

void BackendGroup::count_collective(OpKind kind, const Tensor* t) {
  const std::int64_t P = size(), n = t ? static_cast<std::int64_t>(t->nbytes()) : 0;
  std::lock_guard<std::mutex> lock(traffic_mutex_);
  auto add = [](OpTraffic& o, std::int64_t bytes) { ++o.ops; o.bytes += bytes; };
  switch (kind) {
    case OpKind::all_reduce: add(traffic_.all_reduce, 2 * (P - 1) * n / P); break;
    case OpKind::broadcast: add(traffic_.broadcast, P > 1 ? n : 0); break;
    case OpKind::reduce: add(traffic_.reduce, P > 1 ? n : 0); break;
    case OpKind::all_gather: add(traffic_.all_gather, (P - 1) * n); break;
    case OpKind::reduce_scatter: add(traffic_.reduce_scatter, (P - 1) * n / P); break;
    case OpKind::barrier: add(traffic_.barrier, 0); break;
    default: MGPU_FAIL("count_collective: ", op_kind_name(kind), " is counted elsewhere");
  }
}

void BackendGroup::count_all_to_all(const AllToAllPieces& p, std::size_t element_bytes) {
  std::int64_t elements = 0;
  for (std::size_t r = 0; r < p.send_counts.size(); ++r)
    if (static_cast<int>(r) != rank()) elements += p.send_counts[r];
  std::lock_guard<std::mutex> lock(traffic_mutex_);
  ++traffic_.all_to_all.ops;
  traffic_.all_to_all.bytes += elements * static_cast<std::int64_t>(element_bytes);
}

void BackendGroup::count_p2p(const std::vector<P2POp>& ops) {
  std::lock_guard<std::mutex> lock(traffic_mutex_);
  for (const P2POp& o : ops) {
    OpTraffic& t = o.kind == P2POp::Kind::send ? traffic_.send : traffic_.recv;
    ++t.ops;
    t.bytes += static_cast<std::int64_t>(o.tensor.nbytes());
  }
}

}  // namespace detail
}  // namespace mgpu::dist
