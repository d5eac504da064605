// The nccl backend: every op is an NCCL kernel on the group's own stream. The
// communication thread makes that stream wait for the caller's stream (so an op sees
// the values computed before it was issued), launches the kernel, and polls an event
// recorded after it; the Work completes when that event has.
#include "process_group_nccl.h"

#include "mgpu/error.h"

#ifndef MGPU_WITH_NCCL

namespace mgpu::dist::detail {
bool built_with_nccl() { return false; }
std::shared_ptr<BackendGroup> make_nccl_group(const Device&, const GroupOptions&, MPI_Comm, int) {
  MGPU_FAIL("nccl backend: this build of mgpu has no NCCL; use --backend mpi");
}
}  // namespace mgpu::dist::detail

#else

#include "mpi_include.h"
#include <nccl.h>

#include <atomic>
#include <mutex>

#include "checks.h"
#include "core/cuda_check.h"
#include "engine.h"
#include "mpi_util.h"
#include "progress_board.h"
#include "staging.h"

#define MGPU_NCCL_CHECK(call) \
  MGPU_CHECK_STATUS("NCCL", ncclResult_t, ncclSuccess, ncclGetErrorString, #call, call)

namespace mgpu::dist::detail {

bool built_with_nccl() { return true; }

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

class NcclGroup final : public BackendGroup {
 public:
  NcclGroup(const Device& device, const GroupOptions& options, MPI_Comm comm, int group_id,
            int rank, int size)
      : BackendGroup(rank, size),
        device_(device),
        id_(group_id),
        debug_(resolve_debug(options)),
        comm_(comm) {
    // The group's rank 0 makes the id every member joins with; MPI carries it to the others.
    ncclUniqueId id;
    if (rank == 0) MGPU_NCCL_CHECK(ncclGetUniqueId(&id));
    MGPU_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm_));
    {
      DeviceGuard guard(device_);
      MGPU_NCCL_CHECK(ncclCommInitRank(&nccl_, size, id, rank));
      // A stream of the group's own, not the device's comm stream: an NCCL kernel waits on
      // the GPU for its peers, and kernels of one stream run in issue order. Two groups on one
      // stream (lesson 11's tp and dp groups) could deadlock: each group's comm thread issues
      // when it gets to it, so rank 0 may queue tp's op before dp's while rank 1 queues dp's
      // first; each rank's first kernel then waits for a peer whose matching kernel is stuck
      // behind the other one. With a stream per group, each group's kernels are in its own
      // issue order, the order every rank agrees on.
      MGPU_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    const double timeout_s = resolve_timeout(options);
    std::function<void(const OpSignature&)> precheck;
    if (debug_) {
      MPI_Comm c = comm_;
      precheck = [c, timeout_s](const OpSignature& sig) {
        check_same_collective(c, sig, timeout_s);
      };
    }
    engine_ = std::make_unique<CommEngine>(timeout_s, precheck, device_);
    hold_->launch = [this](std::vector<Held> batch) { launch_held(std::move(batch)); };
  }
  ~NcclGroup() override { shutdown(); }

  std::string backend_name() const override { return "nccl"; }
  Device device() const override { return device_; }
  std::int64_t collectives_issued() const override { return collective_seq_.load(); }

  void shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    hold_->flush();
    {
      std::lock_guard<std::mutex> lock(hold_->mutex);
      hold_->closed = true;
    }
    engine_->shutdown();
    ncclCommDestroy(nccl_);
    {
      DeviceGuard guard(device_);
      cudaStreamDestroy(stream_);  // after the engine: no op of the group is left on it
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  Work all_reduce(const Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    return launch(OpKind::all_reduce, &t, op, -1, t, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()),
                                    nccl_op(op), nccl_, s));
    });
  }
  Work broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    check_rank("broadcast", root, size(), "root");
    return launch(OpKind::broadcast, &t, ReduceOp::sum, root, t, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()),
                                    root, nccl_, s));
    });
  }
  Work reduce(const Tensor& t, int root, ReduceOp op) override {
    check(t, "reduce");
    check_rank("reduce", root, size(), "root");
    return launch(OpKind::reduce, &t, op, root, t, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()),
                                 nccl_op(op), root, nccl_, s));
    });
  }
  Work all_gather(const Tensor& output, const Tensor& input) override {
    check_split("all_gather", output, "output", input, "input", size());
    check(output, "all_gather");
    check(input, "all_gather");
    check_chunk_in_place("all_gather", input, "input", output, "output", rank());
    return launch(OpKind::all_gather, &input, ReduceOp::sum, -1, output, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), input.numel(),
                                    nccl_type(input.dtype()), nccl_, s));
      (void)input;  // keeps input alive with the op
    });
  }
  Work all_to_all(const Tensor& output, const Tensor& input,
                  const std::vector<std::int64_t>& output_split_sizes,
                  const std::vector<std::int64_t>& input_split_sizes) override {
    const AllToAllPieces p = all_to_all_pieces(output, input, output_split_sizes, input_split_sizes, size());
    check(output, "all_to_all");
    check(input, "all_to_all");
    count_all_to_all(p, dtype_size(input.dtype()));
    const int world = size();
    // NCCL has no all-to-all call: a send and a receive per rank in one group, which NCCL
    // runs together (no rank's send waits behind its peer's receive).
    return launch(OpKind::all_to_all, &input, ReduceOp::sum, -1, input, [=](cudaStream_t s) {
      const ncclDataType_t type = nccl_type(input.dtype());
      const std::size_t bytes = dtype_size(input.dtype());
      auto* in = static_cast<const char*>(input.raw_data());
      auto* out = static_cast<char*>(output.raw_data());
      MGPU_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < world; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (p.send_counts[i] > 0)
          MGPU_NCCL_CHECK(ncclSend(in + p.send_offsets[i] * bytes, static_cast<std::size_t>(p.send_counts[i]),
                                   type, r, nccl_, s));
        if (p.recv_counts[i] > 0)
          MGPU_NCCL_CHECK(ncclRecv(out + p.recv_offsets[i] * bytes, static_cast<std::size_t>(p.recv_counts[i]),
                                   type, r, nccl_, s));
      }
      MGPU_NCCL_CHECK(ncclGroupEnd());
      (void)output;  // keeps both tensors alive with the op
    });
  }
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check_split("reduce_scatter", input, "input", output, "output", size());
    check(output, "reduce_scatter");
    check(input, "reduce_scatter");
    check_chunk_in_place("reduce_scatter", output, "output", input, "input", rank());
    return launch(OpKind::reduce_scatter, &input, op, -1, input, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(),
                                        nccl_type(input.dtype()), nccl_op(op), nccl_, s));
    });
  }
  Work barrier() override {
    // NCCL has no barrier: an all-reduce of one number on every rank's GPU is one.
    Tensor token = Tensor::zeros({1}, DType::i32, device_);
    return launch(OpKind::barrier, nullptr, ReduceOp::sum, -1, token, [=](cudaStream_t s) {
      MGPU_NCCL_CHECK(ncclAllReduce(token.raw_data(), token.raw_data(), 1, ncclInt32, ncclSum,
                                    nccl_, s));
    });
  }
  // NCCL runs a group's kernels on the group's stream in issue order, so a lone send followed
  // by a lone recv (one ring step) could wait forever: the send waits for the peer's recv,
  // which is queued behind the peer's own send. Sends and receives are therefore held back
  // and launched together, as one NCCL group, as soon as one of their Works is waited on
  // (or polled) or another op is issued. NCCL has no tags: messages between two ranks
  // match in issue order.
  Work send(const Tensor& t, int dst, int /*tag*/) override { return hold(P2POp::isend(t, dst)); }
  Work recv(const Tensor& t, int src, int /*tag*/) override { return hold(P2POp::irecv(t, src)); }
  Work batch_isend_irecv(const std::vector<P2POp>& ops) override {
    if (ops.empty()) return Work();
    std::vector<Work> works;
    for (const P2POp& o : ops) works.push_back(hold(o));
    hold_->flush();
    // One NCCL group completes all of them at once (finish_all runs in order): the last
    // one's Work stands for the batch.
    return works.back();
  }

 private:
  struct Held {
    P2POp op;
    std::shared_ptr<Event> ready;
    std::shared_ptr<WorkState> state;
    std::int64_t seq;
  };
  // The held-back messages. Shared with the Works (their on_wait flushes it), so a Work
  // that outlives its group finds the hold closed instead of a dangling group.
  struct Hold {
    std::mutex mutex;
    std::vector<Held> held;
    bool closed = false;
    std::function<void(std::vector<Held>)> launch;
    void flush() {
      std::vector<Held> batch;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (closed) return;
        batch.swap(held);
      }
      if (!batch.empty()) launch(std::move(batch));
    }
  };

  static void finish_all(const std::vector<Held>& batch, std::exception_ptr e) {
    for (const Held& h : batch) h.state->finish(e);
  }

  Work hold(const P2POp& o) {
    const bool is_send = o.kind == P2POp::Kind::send;
    check(o.tensor, is_send ? "send" : "recv");
    check_rank(is_send ? "send" : "recv", o.peer, size(), is_send ? "destination" : "source");
    count_p2p({o});
    Held h{o, ready_event(o.tensor), std::make_shared<WorkState>(), ++p2p_seq_};
    h.state->what = p2p_signature({o}, h.seq, "nccl", id_).describe();
    std::weak_ptr<Hold> weak = hold_;
    h.state->on_wait = [weak] {
      if (auto hold = weak.lock()) hold->flush();
    };
    std::lock_guard<std::mutex> lock(hold_->mutex);
    MGPU_CHECK(!hold_->closed, h.state->what, ": the process group was shut down");
    hold_->held.push_back(h);
    return Work(h.state);
  }

  // One NCCL group for the held messages; each Work completes when the group has.
  void launch_held(std::vector<Held> batch) {
    std::vector<P2POp> messages;
    for (const Held& h : batch) messages.push_back(h.op);
    // A batch even of one message: one NCCL group, whatever it holds.
    OpSignature sig = batch_p2p_signature(messages, batch.front().seq, "nccl", id_);
    Device dev = device_;
    ncclComm_t comm = nccl_;
    const Stream s(device_, stream_);
    Op op{sig, [batch, dev, comm, s]() -> Poll {
            try {
              DeviceGuard guard(dev);
              for (const Held& h : batch)
                if (h.ready) h.ready->wait(s);
              auto stream = static_cast<cudaStream_t>(s.handle());
              MGPU_NCCL_CHECK(ncclGroupStart());
              for (const Held& h : batch) {
                const Tensor& t = h.op.tensor;
                if (h.op.kind == P2POp::Kind::send) {
                  MGPU_NCCL_CHECK(ncclSend(t.raw_data(), t.numel(), nccl_type(t.dtype()), h.op.peer, comm, stream));
                } else {
                  MGPU_NCCL_CHECK(ncclRecv(t.raw_data(), t.numel(), nccl_type(t.dtype()), h.op.peer, comm, stream));
                }
              }
              MGPU_NCCL_CHECK(ncclGroupEnd());
              auto done = std::make_shared<Event>();
              done->record(s);
              return [batch, done, comm]() -> bool {
                try {
                  ncclResult_t async_error = ncclSuccess;
                  MGPU_NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error));
                  MGPU_NCCL_CHECK(async_error);
                  if (!done->query()) return false;
                } catch (...) {
                  finish_all(batch, std::current_exception());
                  throw;
                }
                finish_all(batch, nullptr);
                return true;
              };
            } catch (...) {
              finish_all(batch, std::current_exception());
              throw;
            }
          }};
    engine_->submit(std::move(op));
  }

  void check(const Tensor& t, const char* op) const {
    check_tensor(op, t);
    MGPU_CHECK(t.device().is_cuda() && physical_gpu(t.device()) == physical_gpu(device_), op,
               " (nccl): ", t.str(), " is not on this rank's GPU (", device_.str(),
               "); NCCL moves memory of the rank's own GPU only. Move the tensor there, or use "
               "--backend mpi");
  }

  // Queues `body` (the NCCL call) to run on the group's stream after the work the caller's
  // stream has queued on `order_after`; the Work completes when the kernel has.
  Work launch(OpKind kind, const Tensor* sig_tensor, ReduceOp r, int root, const Tensor& order_after,
              std::function<void(cudaStream_t)> body) {
    hold_->flush();  // held sends and receives go first: issue order is run order
    std::int64_t seq = ++collective_seq_;
    OpSignature sig = make_signature(kind, seq, sig_tensor, r, root, "nccl", id_);
    if (kind != OpKind::all_to_all) count_collective(kind, sig_tensor);  // all_to_all counts its pieces
    note_issued(sig, debug_ ? &sig.issued_before : nullptr);
    std::shared_ptr<Event> ready = ready_event(order_after);
    Device dev = device_;
    ncclComm_t comm = nccl_;
    const Stream s(device_, stream_);
    Op op{sig, [=]() -> Poll {
            DeviceGuard guard(dev);
            if (ready) ready->wait(s);
            body(static_cast<cudaStream_t>(s.handle()));
            auto done = std::make_shared<Event>();
            done->record(s);
            return [done, body, comm]() -> bool {
              ncclResult_t async_error = ncclSuccess;
              MGPU_NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error));
              MGPU_NCCL_CHECK(async_error);
              return done->query();
            };
          }};
    return engine_->submit(std::move(op));
  }

  Device device_;
  int id_;
  bool debug_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the group's own stream (see the constructor)
  std::atomic<std::int64_t> collective_seq_{0};
  std::atomic<std::int64_t> p2p_seq_{0};
  std::unique_ptr<CommEngine> engine_;
  std::shared_ptr<Hold> hold_ = std::make_shared<Hold>();
  bool shut_down_ = false;
};

}  // namespace

std::shared_ptr<BackendGroup> make_nccl_group(const Device& device, const GroupOptions& options,
                                              MPI_Comm comm, int id) {
  require_initialized("new_group(nccl)");
  int rank = 0, size = 1;
  MGPU_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MGPU_MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::make_shared<NcclGroup>(device, options, comm, id, rank, size);
}

}  // namespace mgpu::dist::detail

#endif  // MGPU_WITH_NCCL
