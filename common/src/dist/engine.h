// Private: the communication thread every ProcessGroup runs its ops on, the watchdog that
// ends a job whose op exceeds the timeout, and the state behind a Work handle.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::dist::detail {

enum class OpKind { all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier,
                    send, recv, batch_p2p, all_to_all };
const char* op_kind_name(OpKind k);

/// What an op is, as ranks compare it in debug mode and as messages name it.
struct OpSignature {
  OpKind kind = OpKind::barrier;
  std::int64_t seq = 0;          // collectives: 1, 2, ... per group; p2p ops count apart
  ReduceOp reduce = ReduceOp::sum;
  DType dtype = DType::f32;
  int root = -1;                 // broadcast/reduce root, or send/recv peer
  Shape shape;                   // of the op's (input) tensor; empty for barrier; all_to_all:
                                 // of one row (the rows' counts may differ between ranks)
  bool has_tensor = false;
  std::string backend;
  int group = -1;                // the group's world-wide id (progress_board.h); -1: unknown
  int tag = -1;                  // send/recv: the message's tag
  /// One message of a batch_isend_irecv.
  struct Message {
    bool send = false;
    int peer = -1;               // the group rank it goes to or comes from
    int tag = -1;
    DType dtype = DType::f32;
    std::int64_t numel = 0;
  };
  std::vector<Message> messages;  // batch_isend_irecv: its messages, in the order given
  /// Debug mode: collectives this rank had issued on each tracked group before this one.
  std::vector<std::int64_t> issued_before;

  bool is_collective() const { return kind != OpKind::send && kind != OpKind::recv &&
                                      kind != OpKind::batch_p2p; }
  /// "all_reduce #3 f32[1000] op=sum (mpi)", "recv #2 f32[4] from rank 1 tag 7 (mpi)",
  /// "batch_isend_irecv #5 (mpi): send f32[64] to rank 1 tag 40, recv f32[64] from rank 3 tag 40".
  std::string describe() const;
};

/// Shared by a Work handle and the op it stands for.
struct WorkState {
  std::string what;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  /// When finish() ran: read by Work::completion_time_s (traces of overlap).
  std::chrono::steady_clock::time_point finished_at;
  std::exception_ptr error;
  /// Runs (on the waiting thread) before wait() blocks and in is_completed(): the nccl
  /// backend launches held-back sends and receives here. Empty for most ops.
  std::function<void()> on_wait;

  void finish(std::exception_ptr e);
};

/// Polls a started op: returns true once it is complete. Throws on failure.
using Poll = std::function<bool()>;

/// One queued op. start() runs on the communication thread; it either finishes the op
/// (and returns an empty Poll) or starts it and returns how to check for its completion.
struct Op {
  OpSignature sig;
  std::function<Poll()> start;
};

/// Runs ops in issue order on one thread, with a watchdog that ends the job on timeout.
class CommEngine {
 public:
  /// `precheck` (may be empty) runs on the comm thread before each collective: the debug
  /// mode's cross-rank comparison. It throws to fail the op on every rank. `device` is the
  /// group's: the comm thread makes its GPU current once, when it starts.
  CommEngine(double timeout_s, std::function<void(const OpSignature&)> precheck,
             const Device& device);
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  Work submit(Op op);
  /// Finishes the queued ops, then stops both threads. Idempotent.
  void shutdown();
  double timeout_s() const { return timeout_s_; }

 private:
  struct Pending {
    std::shared_ptr<WorkState> work;
    OpSignature sig;
    Poll poll;
    std::chrono::steady_clock::time_point started;
    /// Members of the node had not issued this collective when it started: compared with
    /// theirs (compare_with_peers) while it runs and once it completes.
    bool awaiting_peers = false;
  };
  void run();
  void watch();
  void begin_tracking(Pending& p);
  /// Compares a collective with the other members' (progress_board.h) where `p` still awaits
  /// some; throws on a mismatch.
  static void compare(Pending& p);
  /// Takes the op off the watchdog's list and publishes a finished collective.
  void end_tracking(const WorkState* w, const OpSignature& sig);
  /// Publishes this group's oldest point-to-point op in flight on the progress board.
  void publish_oldest_p2p(int group);
  bool poll_outstanding();

  double timeout_s_;
  std::function<void(const OpSignature&)> precheck_;
  Device device_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<Op, std::shared_ptr<WorkState>>> queue_;
  bool stopping_ = false;
  std::list<Pending> outstanding_;  // comm thread only

  // In-flight ops for the watchdog.
  struct Tracked {
    const WorkState* work;
    OpSignature sig;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::steady_clock::time_point started;
  };
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::list<Tracked> in_flight_;
  bool watch_stop_ = false;

  std::thread comm_thread_;
  std::thread watchdog_thread_;
};

}  // namespace mgpu::dist::detail
