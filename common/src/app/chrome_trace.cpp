// Trace: spans per rank and track, gathered to rank 0, written as one Chrome trace.
#include "mgpu/app/trace.h"

#include <nlohmann/json.hpp>

#include <cstring>

#include "mgpu/dist/runtime.h"
#include "mgpu/error.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/tensor.h"

namespace mgpu::app {

using nlohmann::json;

void Trace::open(const std::string& path, double origin_s) {
  MGPU_CHECK(!path.empty(), "--trace: the path is empty");
  path_ = path;
  origin_s_ = origin_s;
  if (dist::rank() == 0) {
    try {
      io::probe_writable(path);
    } catch (const std::exception& e) {
      MGPU_FAIL("--trace: ", e.what(), " (does its folder exist, and may you write there?)");
    }
    writer_ = true;
  }
  on_ = true;
}

Trace::~Trace() {
  if (!on_ || written_ || !writer_) return;
  try {
    write(nullptr);  // this rank's spans only: no collective while unwinding
  } catch (...) {
  }
}

void Trace::name_process(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  process_name_ = name;
}

void Trace::declare_tracks(const std::vector<std::string>& tracks) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& t : tracks) track_id(t);
}

int Trace::track_id(const std::string& track) {
  for (std::size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == track) return static_cast<int>(i);
  tracks_.push_back(track);
  return static_cast<int>(tracks_.size()) - 1;
}

void Trace::span(const std::string& track, const std::string& name, double begin_s, double end_s,
                 const TraceArgs& args) {
  if (!on_ || end_s < begin_s) return;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back({track_id(track), name, begin_s, end_s, args});
}

std::size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_.size();
}

std::string Trace::events_json(int pid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  json events = json::array();
  const std::string process = process_name_.empty() ? "rank " + std::to_string(pid) : process_name_;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                    {"args", {{"name", process}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid},
                    {"args", {{"sort_index", pid}}}});
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t},
                      {"args", {{"name", tracks_[t]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", t},
                      {"args", {{"sort_index", t}}}});
  }
  // "X" is a complete event: a start and a duration, in microseconds.
  for (const Span& s : spans_) {
    json e{{"name", s.name}, {"ph", "X"}, {"pid", pid}, {"tid", s.track},
           {"ts", (s.begin_s - origin_s_) * 1e6}, {"dur", (s.end_s - s.begin_s) * 1e6}};
    if (!s.args.empty()) {
      json args = json::object();
      for (const auto& [key, value] : s.args) args[key] = value;
      e["args"] = std::move(args);
    }
    events.push_back(std::move(e));
  }
  return events.dump();
}

namespace {

// The library has no byte dtype: text travels as i32 words (its length goes first).
void send_text(dist::ProcessGroup& group, const std::string& text, int dst) {
  Tensor len = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(text.size())}, {1});
  Tensor words = Tensor::zeros({static_cast<std::int64_t>((text.size() + 3) / 4)}, DType::i32);
  std::memcpy(words.raw_data(), text.data(), text.size());
  group.send(len, dst, 1).wait();
  group.send(words, dst, 2).wait();
}

std::string recv_text(dist::ProcessGroup& group, int src) {
  Tensor len = Tensor::zeros({1}, DType::i64);
  group.recv(len, src, 1).wait();
  const auto n = static_cast<std::size_t>(len.to_vector<std::int64_t>()[0]);
  Tensor words = Tensor::zeros({static_cast<std::int64_t>((n + 3) / 4)}, DType::i32);
  group.recv(words, src, 2).wait();
  return std::string(static_cast<const char*>(words.raw_data()), n);
}

}  // namespace

void Trace::write(dist::ProcessGroup* group) {
  if (!on_) return;
  written_ = true;
  const int rank = group ? group->rank() : dist::rank();
  if (rank != 0) {
    if (group) send_text(*group, events_json(rank), 0);
    return;
  }
  const std::string mine = events_json(0);
  json all = json::parse(mine);
  for (int r = 1; group && r < group->size(); ++r)
    for (auto& e : json::parse(recv_text(*group, r))) all.push_back(std::move(e));
  const std::string text = json{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  try {  // a temporary file renamed over path_: never a truncated trace under its name
    io::atomic_replace(io::parent_directory(path_), path_.substr(path_.find_last_of('/') + 1), text);
  } catch (const std::exception& e) {
    MGPU_FAIL("--trace: writing ", path_, " failed: ", e.what());
  }
}

}  // namespace mgpu::app
