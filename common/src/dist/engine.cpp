// The communication thread and the watchdog.
//
// Why one thread per group: ops must leave the caller at once (DDP keeps computing the
// backward pass while gradients are being all-reduced), yet run in issue order, the order
// every rank agrees on. A FIFO drained by one thread gives both. MPI is initialized with
// MPI_THREAD_MULTIPLE because each group's thread calls MPI on its own communicator while
// the main thread may call it too (setup, other groups).
//
// Why a separate watchdog: a rank stuck inside a blocking MPI collective cannot check a
// clock, so another thread does, and ends the job when an op overstays its deadline. Its
// message names the ranks that have not reached the op, read from the progress board
// (progress_board.h), which this engine keeps up to date as collectives finish.
#include "engine.h"

#include "mpi_include.h"

#include "diagnose.h"
#include "progress_board.h"

#include <algorithm>
#include <sstream>

#include "mgpu/dist/log.h"
#include "mgpu/dist/runtime.h"

namespace mgpu::dist::detail {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::broadcast: return "broadcast";
    case OpKind::reduce: return "reduce";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::barrier: return "barrier";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::batch_p2p: return "batch_isend_irecv";
    case OpKind::all_to_all: return "all_to_all";
  }
  return "?";
}

std::string OpSignature::describe() const {
  std::ostringstream os;
  os << op_kind_name(kind) << " #" << seq;
  if (has_tensor) os << (kind == OpKind::all_to_all ? " rows of " : " ") << dtype_name(dtype) << shape_str(shape);
  switch (kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter: os << " op=" << reduce_op_name(reduce); break;
    case OpKind::reduce: os << " op=" << reduce_op_name(reduce) << " root=" << root; break;
    case OpKind::broadcast: os << " root=" << root; break;
    case OpKind::send: os << " to rank " << root; break;
    case OpKind::recv: os << " from rank " << root; break;
    default: break;
  }
  if ((kind == OpKind::send || kind == OpKind::recv) && tag >= 0) os << " tag " << tag;
  if (!backend.empty()) os << " (" << backend << ")";
  constexpr std::size_t kShown = 4;
  for (std::size_t i = 0; i < std::min(messages.size(), kShown); ++i) {
    const Message& m = messages[i];
    os << (i ? ", " : ": ") << (m.send ? "send " : "recv ") << dtype_name(m.dtype) << '['
       << m.numel << ']' << (m.send ? " to rank " : " from rank ") << m.peer << " tag " << m.tag;
  }
  if (messages.size() > kShown) os << ", … (" << messages.size() << " messages)";
  return os.str();
}

void WorkState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = e;
    done = true;
    finished_at = std::chrono::steady_clock::now();
  }
  cv.notify_all();
}

CommEngine::CommEngine(double timeout_s, std::function<void(const OpSignature&)> precheck,
                       const Device& device)
    : timeout_s_(timeout_s), precheck_(std::move(precheck)), device_(device) {
  comm_thread_ = std::thread([this] { run(); });
  watchdog_thread_ = std::thread([this] { watch(); });
}

CommEngine::~CommEngine() { shutdown(); }

Work CommEngine::submit(Op op) {
  auto state = std::make_shared<WorkState>();
  state->what = op.sig.describe();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MGPU_CHECK(!stopping_, state->what, ": the process group was shut down (dist::finalize())");
    queue_.emplace_back(std::move(op), state);
  }
  cv_.notify_one();
  return Work(state);
}

void CommEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
}

void CommEngine::begin_tracking(Pending& p) {
  p.started = std::chrono::steady_clock::now();
  if (timeout_s_ <= 0) return;  // no limit
  auto deadline = p.started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(timeout_s_));
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    in_flight_.push_back({p.work.get(), p.sig, deadline, p.started});
  }
  watch_cv_.notify_all();
  if (!p.sig.is_collective()) {
    note_sent(p.sig);
    publish_oldest_p2p(p.sig.group);
  }
}

void CommEngine::end_tracking(const WorkState* w, const OpSignature& sig) {
  if (sig.is_collective()) note_done(sig);
  if (timeout_s_ <= 0) return;
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    in_flight_.remove_if([w](const Tracked& e) { return e.work == w; });
  }
  if (!sig.is_collective()) publish_oldest_p2p(sig.group);
}

void CommEngine::publish_oldest_p2p(int group) {
  // This group's oldest point-to-point op still in flight, for a peer's timeout message.
  OpSignature oldest;
  std::chrono::steady_clock::time_point since{};
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    for (const Tracked& e : in_flight_)
      if (!e.sig.is_collective() && (!any || e.started < since)) {
        oldest = e.sig;
        since = e.started;
        any = true;
      }
  }
  note_p2p_in_flight(group, any ? &oldest : nullptr);
}

void CommEngine::compare(Pending& p) {
  if (p.awaiting_peers) p.awaiting_peers = compare_with_peers(p.sig) > 0;
}

namespace {

// An op that failed the comparison while MPI or NCCL may still write into its tensors: its
// poll, which holds them, is kept for the rest of the process instead of freed under them.
void keep_until_exit(Poll poll) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Poll>();  // never freed, on purpose
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(poll));
}

}  // namespace

bool CommEngine::poll_outstanding() {
  bool any = false;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    std::exception_ptr error;
    bool done = false;
    try {
      done = it->poll();
      // A mismatch found while the op runs (it may never complete) ends it now too.
      try {
        compare(*it);
      } catch (...) {
        if (!done) keep_until_exit(std::move(it->poll));
        throw;
      }
    } catch (...) {
      error = std::current_exception();
      done = true;
      // An op that failed (MPI's truncation error, say) because the ranks disagreed on it:
      // the mismatch is the error to report.
      if (it->sig.is_collective()) {
        try {
          it->awaiting_peers = true;
          compare(*it);
        } catch (...) {
          error = std::current_exception();
        }
      }
    }
    if (!done) {
      ++it;
      continue;
    }
    auto work = it->work;
    end_tracking(work.get(), it->sig);
    it = outstanding_.erase(it);  // drops the op's tensors before the caller sees it done
    work->finish(error);
    any = true;
  }
  return any;
}

void CommEngine::run() {
  // The group's GPU, made current once for this thread's whole life. A fresh thread reports
  // device 0 without having a context there; the first CUDA call that needs one (the mpi
  // backend's pinned staging buffers, an event) would create it on GPU 0, on every rank,
  // whatever GPU the rank uses. A failure here (no GPU) shows again, with its reason, in the
  // first op that touches the device.
  try {
    set_thread_device(device_);
  } catch (...) {
  }
  int idle = 0;
  for (;;) {
    std::pair<Op, std::shared_ptr<WorkState>> item;
    bool have = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (queue_.empty() && outstanding_.empty()) {
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing is left to do
      }
      if (!queue_.empty()) {
        item = std::move(queue_.front());
        queue_.pop_front();
        have = true;
      }
    }
    if (!have) {
      // Only started ops are left: check them, backing off from spinning to sleeping so
      // that oversubscribed ranks (more ranks than cores) leave each other CPU time.
      if (poll_outstanding()) {
        idle = 0;
      } else if (++idle > 2048) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait_for(lock, std::chrono::microseconds(100),
                     [this] { return !queue_.empty(); });
      } else if (idle > 64) {
        std::this_thread::yield();
      }
      continue;
    }
    idle = 0;
    Pending p{item.second, item.first.sig, {}, {}};
    begin_tracking(p);
    try {
      if (p.sig.is_collective()) {
        if (precheck_) precheck_(p.sig);
        // Always on: the members that issued it already must agree on what it is.
        p.awaiting_peers = true;
        compare(p);
      }
      p.poll = item.first.start();
      if (!p.poll) compare(p);  // completed already: the members that issued it since
    } catch (...) {
      end_tracking(p.work.get(), p.sig);
      item.first.start = nullptr;
      p.work->finish(std::current_exception());
      continue;
    }
    item.first.start = nullptr;  // release the op's tensors unless the poll still holds them
    if (p.poll) {
      outstanding_.push_back(std::move(p));
      poll_outstanding();
    } else {
      end_tracking(p.work.get(), p.sig);
      p.work->finish(nullptr);
    }
  }
}

void CommEngine::watch() {
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!watch_stop_) {
    if (in_flight_.empty()) {
      watch_cv_.wait(lock);
      continue;
    }
    auto earliest = in_flight_.begin();
    for (auto e = in_flight_.begin(); e != in_flight_.end(); ++e)
      if (e->deadline < earliest->deadline) earliest = e;
    // The message reads the other ranks' progress (diagnose.h) to name the ones behind.
    const auto now = std::chrono::steady_clock::now();
    if (now >= earliest->deadline) abort_job(timeout_message(earliest->sig, timeout_s_), 3);
    // A collective in flight for a second is compared with the members' again: a rank
    // inside a blocking MPI call cannot, and the members that found the mismatch when they
    // issued it later did not run it, so it would wait for the timeout.
    constexpr auto kLook = std::chrono::seconds(1);
    for (const Tracked& e : in_flight_) {
      if (!e.sig.is_collective() || now - e.started < kLook) continue;
      try {
        compare_with_peers(e.sig);
      } catch (const std::exception& mismatch) {
        abort_job(mismatch.what(), 3);
      }
    }
    // The list may change while we wait.
    const auto deadline = std::min(earliest->deadline, now + kLook);
    watch_cv_.wait_until(lock, deadline);
  }
}

}  // namespace mgpu::dist::detail
