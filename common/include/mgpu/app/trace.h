/// @file trace.h
/// @brief Trace: spans of a run per rank and track, written as one Chrome trace.
///
/// A span is a named interval on a track (a row of the timeline: "compute", "comm",
/// "stage 1 on cpu:1"). Each rank records its own spans; write() gathers them to rank 0,
/// which writes one JSON file in the Chrome trace event format: one process per rank, one
/// thread per track. https://ui.perfetto.dev and chrome://tracing draw it.
///
///     app::Trace trace;
///     trace.open("run.json");                    // rank 0 creates the file now
///     const double t0 = app::now_s();
///     ... forward ...
///     trace.span("compute", "forward", t0, app::now_s());
///     trace.write(&cpu_group);                   // every rank calls it
///
/// span() is thread-safe, so a communication thread or a comm hook can record into the
/// same trace as the step loop (times on app::now_s()).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/dist/process_group.h"

namespace mgpu::app {

/// Numbers attached to a span, shown when it is selected ({"bytes", 4096}).
using TraceArgs = std::vector<std::pair<std::string, double>>;

/// Records spans per track and writes them as a Chrome trace (see the file comment).
class Trace {
 public:
  /// An empty, switched-off trace: span() records nothing until open().
  Trace() = default;
  /// A trace that was opened but never written (the program stopped early on an error)
  /// still gets a valid file: this process's spans, without the other ranks'.
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// Switches recording on. On rank 0 (dist::rank()) checks now that `path` can be written
  /// (io::probe_writable), so that an unwritable path fails before any training, never
  /// after it; the file itself is written by write(), atomically (io::atomic_replace: a
  /// temporary file renamed over `path`), so a full disk leaves no truncated trace. Times
  /// are written relative to `origin_s` (app::now_s() seconds; give every rank the same
  /// moment, e.g. after a barrier, to line their rows up).
  void open(const std::string& path, double origin_s);
  /// True after open(): callers can skip work that only feeds the trace.
  bool on() const { return on_; }
  /// Where the trace is written.
  const std::string& path() const { return path_; }

  /// Names this rank's row group (default "rank R").
  void name_process(const std::string& name);
  /// Fixes the order of tracks on the timeline (tracks not listed follow in order of use).
  void declare_tracks(const std::vector<std::string>& tracks);
  /// Records `name` on `track` from `begin_s` to `end_s` (app::now_s() seconds). Does
  /// nothing while off or when end_s < begin_s.
  void span(const std::string& track, const std::string& name, double begin_s, double end_s,
            const TraceArgs& args = {});
  /// Spans recorded so far on this rank.
  std::size_t size() const;

  /// Writes the file. With `group` (a CPU group: the spans travel as CPU tensors) every rank
  /// of it must call write(): ranks send their spans to rank 0, which writes them all.
  /// Without a group, this process's spans alone. Does nothing while off.
  void write(dist::ProcessGroup* group = nullptr);

 private:
  struct Span {
    int track;
    std::string name;
    double begin_s, end_s;
    TraceArgs args;
  };
  int track_id(const std::string& track);  // caller holds mutex_
  std::string events_json(int pid) const;   // this rank's events, a JSON array

  bool on_ = false, written_ = false;
  std::string path_;
  double origin_s_ = 0;
  bool writer_ = false;  // rank 0: writes the file
  std::string process_name_;
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;
  std::vector<Span> spans_;
};

}  // namespace mgpu::app
