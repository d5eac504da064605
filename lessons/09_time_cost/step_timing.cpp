// Lesson 09's program support: the phase clock, its markers, and the breakdown of every
// rank (see step_timing.h). Nothing to write here.
#include "step_timing.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "mgpu/app/clock.h"

namespace mgpu::lesson09 {

// ---- PhaseClock -------------------------------------------------------------------------
PhaseClock::PhaseClock(Device device) : device_(device) {
  if (device_.is_cuda())
    for (auto& e : events_) e = std::make_unique<Event>(/*timing=*/true);
}

void PhaseClock::begin_step() {
  marked_.fill(false);
  if (device_.is_cuda()) synchronize(device_);  // the GPU idle: its events start from here
  host_begin_ = app::now_s();
  mark(Mark::step_begin);
}

void PhaseClock::mark(Mark m) {
  const int i = static_cast<int>(m);
  marked_[i] = true;
  if (device_.is_cuda()) {
    events_[i]->record(Stream::current(device_));
  } else {
    times_[i] = app::now_s();  // the CPU computes synchronously: the clock is the truth
  }
}

void PhaseClock::end_step() {
  if (!device_.is_cuda()) {
    // A mark that was not reached this step (no optimizer under no_sync) takes the time of
    // the mark before it: its phase has length 0.
    for (int i = 1; i < static_cast<int>(Mark::count); ++i)
      if (!marked_[i]) times_[i] = times_[i - 1];
    return;
  }
  const Event& first = *events_[0];
  int last = 0;
  for (int i = 0; i < static_cast<int>(Mark::count); ++i)
    if (marked_[i]) last = i;
  events_[last]->synchronize();
  times_[0] = host_begin_;
  for (int i = 1; i < static_cast<int>(Mark::count); ++i)
    times_[i] = marked_[i] ? host_begin_ + 1e-3 * events_[i]->elapsed_ms(first) : times_[i - 1];
}

// ---- ClockMarker ------------------------------------------------------------------------
Tensor ClockMarker::forward(const Tensor& x) {
  if (on_forward_ != Mark::count) clock_.mark(on_forward_);
  return x;
}

Tensor ClockMarker::backward(const Tensor& grad_out) {
  if (on_backward_ != Mark::count) clock_.mark(on_backward_);
  return grad_out;
}

std::shared_ptr<nn::Module> ClockMarker::clone() const {
  return std::make_shared<ClockMarker>(clock_, on_forward_, on_backward_);
}

// ---- Breakdown --------------------------------------------------------------------------
namespace {

std::vector<double> as_vector(const perf::Phases& p) {
  return {p.data_wait, p.h2d, p.forward, p.backward, p.exposed_comm, p.optimizer, p.other};
}

perf::Phases from_vector(const double* v) {
  perf::Phases p;
  p.data_wait = v[0], p.h2d = v[1], p.forward = v[2], p.backward = v[3];
  p.exposed_comm = v[4], p.optimizer = v[5], p.other = v[6];
  return p;
}

const char* const kPhaseNames[] = {"data_wait", "h2d", "forward", "backward",
                                   "exposed_comm", "optimizer", "other"};

nlohmann::json phases_ms(const perf::Phases& p) {
  nlohmann::json j;
  const std::vector<double> v = as_vector(p);
  for (std::size_t i = 0; i < v.size(); ++i) j[kPhaseNames[i]] = 1e3 * v[i];
  return j;
}

// One rank's samples as doubles: 13 per step, then 4 per bucket.
std::vector<double> pack(const std::vector<StepSample>& samples) {
  std::vector<double> out;
  for (const StepSample& s : samples) {
    out.insert(out.end(), {static_cast<double>(s.epoch), static_cast<double>(s.step),
                           static_cast<double>(s.batch), s.synchronized ? 1.0 : 0.0});
    for (double v : as_vector(s.phases)) out.push_back(v);
    out.push_back(s.backward_s);
    out.push_back(static_cast<double>(s.buckets.size()));
    for (const parallel::CommRecord& b : s.buckets)
      out.insert(out.end(), {static_cast<double>(b.index), static_cast<double>(b.bytes),
                             b.launch_s, b.done_s});
  }
  return out;
}

std::vector<StepSample> unpack(const std::vector<double>& v) {
  std::vector<StepSample> out;
  for (std::size_t i = 0; i + 13 <= v.size();) {
    StepSample s;
    s.epoch = static_cast<int>(v[i]);
    s.step = static_cast<std::int64_t>(v[i + 1]);
    s.batch = static_cast<std::int64_t>(v[i + 2]);
    s.synchronized = v[i + 3] != 0;
    s.phases = from_vector(&v[i + 4]);
    s.backward_s = v[i + 11];
    const auto n = static_cast<std::size_t>(v[i + 12]);
    i += 13;
    for (std::size_t k = 0; k < n && i + 4 <= v.size(); ++k, i += 4)
      s.buckets.push_back({static_cast<std::size_t>(v[i]), static_cast<std::size_t>(v[i + 1]),
                           v[i + 2], v[i + 3], "all-reduce"});  // DDP's buckets: all-reductions
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

Breakdown::EpochMeans Breakdown::epoch_means(int epoch, dist::ProcessGroup& group) const {
  std::vector<perf::Phases> mine;
  for (const StepSample& s : samples_)
    if (s.epoch == epoch && s.step >= warmup_) mine.push_back(s.phases);
  // Every rank's mean, side by side: [rank][phase], summed (each rank fills its own row).
  const int world = group.size();
  std::vector<double> table(static_cast<std::size_t>(world) * 7, 0.0);
  const std::vector<double> m = as_vector(perf::mean_phases(mine));
  std::copy(m.begin(), m.end(), table.begin() + 7 * group.rank());
  Tensor t = Tensor::from_vector(table, {static_cast<std::int64_t>(table.size())});
  group.all_reduce(t).wait();
  table = t.to_vector<double>();
  std::vector<perf::Phases> ranks;
  EpochMeans out;
  for (int r = 0; r < world; ++r) ranks.push_back(from_vector(&table[7 * r]));
  out.mean = perf::mean_phases(ranks);
  std::vector<double> slowest(7, 0.0);
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < 7; ++k) slowest[k] = std::max(slowest[k], table[7 * r + k]);
  out.slowest = from_vector(slowest.data());
  out.steps = static_cast<std::int64_t>(mine.size());
  return out;
}

void Breakdown::write(const std::string& path, dist::ProcessGroup& group) const {
  const std::vector<double> mine = pack(samples_);
  if (group.rank() != 0) {
    Tensor len = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())}, {1});
    group.send(len, 0, 91).wait();
    if (!mine.empty())
      group.send(Tensor::from_vector(mine, {static_cast<std::int64_t>(mine.size())}), 0, 92).wait();
    return;
  }
  std::ofstream out(path);
  MGPU_CHECK(out.good(), "--breakdown: cannot write ", path);
  for (int r = 0; r < group.size(); ++r) {
    std::vector<double> theirs = mine;
    if (r != 0) {
      Tensor len = Tensor::zeros({1}, DType::i64);
      group.recv(len, r, 91).wait();
      const std::int64_t n = len.to_vector<std::int64_t>()[0];
      theirs.clear();
      if (n > 0) {
        Tensor buf = Tensor::zeros({n}, DType::f64);
        group.recv(buf, r, 92).wait();
        theirs = buf.to_vector<double>();
      }
    }
    for (const StepSample& s : unpack(theirs)) {
      nlohmann::json buckets = nlohmann::json::array();
      for (const parallel::CommRecord& b : s.buckets)
        buckets.push_back({{"bucket", b.index}, {"bytes", b.bytes},
                           {"launch_ms", 1e3 * b.launch_s}, {"done_ms", 1e3 * b.done_s},
                           {"ready", s.backward_s > 0 ? b.launch_s / s.backward_s : 1.0}});
      out << nlohmann::json{{"rank", r}, {"epoch", s.epoch + 1}, {"step", s.step},
                            {"measured", s.step >= warmup_}, {"batch", s.batch},
                            {"synchronized", s.synchronized}, {"phases_ms", phases_ms(s.phases)},
                            {"backward_ms", 1e3 * s.backward_s}, {"buckets", buckets}}
                 .dump()
          << "\n";
    }
  }
}

}  // namespace mgpu::lesson09
