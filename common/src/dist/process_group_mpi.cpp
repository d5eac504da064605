// The mpi backend: each op becomes one MPI call on the group's communication thread.
// Collectives use MPI's blocking calls (Open MPI's tuned algorithms for them are faster than
// its non-blocking ones); send and recv are MPI_Isend/MPI_Irecv, polled until complete, so a
// rank can post a send and a receive and neither waits for the other.
#include "process_group_mpi.h"

#include <cstring>

#include "checks.h"
#include "mpi_util.h"
#include "progress_board.h"

namespace mgpu::dist::detail {

namespace {

int comm_rank(MPI_Comm c) {
  int r = 0;
  MGPU_MPI_CHECK(MPI_Comm_rank(c, &r));
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 1;
  MGPU_MPI_CHECK(MPI_Comm_size(c, &s));
  return s;
}

// A receive that got fewer elements than the tensor holds would leave stale values behind.
void check_received(const MPI_Status& st, const Tensor& t, int src) {
  int got = 0;
  MGPU_MPI_CHECK(MPI_Get_count(&st, mpi_datatype(t.dtype()), &got));
  MGPU_CHECK(got == t.numel(), "recv: rank ", src, " sent ", got, " elements but the receive tensor ",
             t.str(), " holds ", t.numel(), "; sender and receiver must agree on the size");
}

}  // namespace

MpiGroup::MpiGroup(const Device& device, const GroupOptions& options, MPI_Comm comm, int id)
    : BackendGroup(comm_rank(comm), comm_size(comm)),
      device_(device),
      id_(id),
      debug_(resolve_debug(options)),
      comm_(comm) {
  const double timeout_s = resolve_timeout(options);
  std::function<void(const OpSignature&)> precheck;
  if (debug_) {
    MPI_Comm c = comm_;
    precheck = [c, timeout_s](const OpSignature& sig) { check_same_collective(c, sig, timeout_s); };
  }
  engine_ = std::make_unique<CommEngine>(timeout_s, precheck, device_);
}

MpiGroup::~MpiGroup() { shutdown(); }

void MpiGroup::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  engine_->shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

Work MpiGroup::collective(OpKind kind, const Tensor* t, ReduceOp r, int root,
                          std::function<Poll()> start) {
  OpSignature sig = make_signature(kind, ++collective_seq_, t, r, root, "mpi", id_);
  if (kind != OpKind::all_to_all) count_collective(kind, t);  // all_to_all counts its pieces
  note_issued(sig, debug_ ? &sig.issued_before : nullptr);
  return engine_->submit(Op{std::move(sig), std::move(start)});
}

Work MpiGroup::p2p(const std::vector<P2POp>& ops, std::function<Poll()> start) {
  count_p2p(ops);
  return engine_->submit(Op{p2p_signature(ops, ++p2p_seq_, "mpi", id_), std::move(start)});
}

Work MpiGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t);
  check_reduce_op("all_reduce", t, op);
  int n = mpi_count(t.numel(), "all_reduce");
  auto ready = ready_event(t);
  MPI_Comm comm = comm_;
  int world = size();
  return collective(OpKind::all_reduce, &t, op, -1, [=]() -> Poll {
    Staged h(t, true, pool_, ready);
    MGPU_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h.data(), n, mpi_datatype(t.dtype()),
                                 mpi_op(op, t.dtype()), comm));
    if (op == ReduceOp::avg) divide_host(h.data(), t.dtype(), n, world);
    h.copy_out();
    return nullptr;
  });
}

Work MpiGroup::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t);
  check_rank("broadcast", root, size(), "root");
  int n = mpi_count(t.numel(), "broadcast");
  auto ready = ready_event(t);
  MPI_Comm comm = comm_;
  bool is_root = rank() == root;
  return collective(OpKind::broadcast, &t, ReduceOp::sum, root, [=]() -> Poll {
    Staged h(t, is_root, pool_, ready);
    MGPU_MPI_CHECK(MPI_Bcast(h.data(), n, mpi_datatype(t.dtype()), root, comm));
    if (!is_root) h.copy_out();
    return nullptr;
  });
}

Work MpiGroup::reduce(const Tensor& t, int root, ReduceOp op) {
  check_tensor("reduce", t);
  check_rank("reduce", root, size(), "root");
  check_reduce_op("reduce", t, op);
  int n = mpi_count(t.numel(), "reduce");
  auto ready = ready_event(t);
  MPI_Comm comm = comm_;
  bool is_root = rank() == root;
  int world = size();
  return collective(OpKind::reduce, &t, op, root, [=]() -> Poll {
    Staged h(t, true, pool_, ready);
    MPI_Datatype type = mpi_datatype(t.dtype());
    if (is_root) {
      MGPU_MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, h.data(), n, type, mpi_op(op, t.dtype()), root, comm));
      if (op == ReduceOp::avg) divide_host(h.data(), t.dtype(), n, world);
      h.copy_out();
    } else {
      MGPU_MPI_CHECK(MPI_Reduce(h.data(), nullptr, n, type, mpi_op(op, t.dtype()), root, comm));
    }
    return nullptr;
  });
}

Work MpiGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_split("all_gather", output, "output", input, "input", size());
  check_same_device("all_gather", output, input);
  int n = mpi_count(input.numel(), "all_gather");
  mpi_count(output.numel(), "all_gather");
  // input may already sit at its place in output (chunk rank()): MPI's in-place form.
  const bool in_place = check_chunk_in_place("all_gather", input, "input", output, "output", rank());
  auto ready = ready_event(output);
  MPI_Comm comm = comm_;
  return collective(OpKind::all_gather, &input, ReduceOp::sum, -1, [=]() -> Poll {
    MPI_Datatype type = mpi_datatype(input.dtype());
    if (in_place && input.device().is_cpu()) {
      MGPU_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, type, output.raw_data(), n, type, comm));
      return nullptr;
    }
    Staged in(input, true, pool_, ready);
    Staged out(output, false, pool_, ready);
    MGPU_MPI_CHECK(MPI_Allgather(in.data(), n, type, out.data(), n, type, comm));
    out.copy_out();
    return nullptr;
  });
}

Work MpiGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_split("reduce_scatter", input, "input", output, "output", size());
  check_same_device("reduce_scatter", output, input);
  check_reduce_op("reduce_scatter", input, op);
  int n = mpi_count(output.numel(), "reduce_scatter");
  mpi_count(input.numel(), "reduce_scatter");
  bool alias = overlaps(input, output);
  auto ready = ready_event(input);
  MPI_Comm comm = comm_;
  int world = size();
  return collective(OpKind::reduce_scatter, &input, op, -1, [=]() -> Poll {
    Staged in(input, true, pool_, ready);
    // MPI forbids send and receive buffers that overlap: receive aside, then copy.
    Tensor out_host = alias && output.device().is_cpu() ? Tensor::empty(output.shape(), output.dtype())
                                                       : Tensor();
    Staged out(out_host.defined() ? out_host : output, false, pool_, ready);
    MGPU_MPI_CHECK(MPI_Reduce_scatter_block(in.data(), out.data(), n, mpi_datatype(input.dtype()),
                                            mpi_op(op, input.dtype()), comm));
    if (op == ReduceOp::avg) divide_host(out.data(), output.dtype(), n, world);
    out.copy_out();
    if (out_host.defined()) std::memcpy(output.raw_data(), out_host.raw_data(), output.nbytes());
    return nullptr;
  });
}

Work MpiGroup::all_to_all(const Tensor& output, const Tensor& input,
                          const std::vector<std::int64_t>& output_split_sizes,
                          const std::vector<std::int64_t>& input_split_sizes) {
  const AllToAllPieces p = all_to_all_pieces(output, input, output_split_sizes, input_split_sizes, size());
  mpi_count(input.numel(), "all_to_all");
  mpi_count(output.numel(), "all_to_all");
  count_all_to_all(p, dtype_size(input.dtype()));
  auto ints = [](const std::vector<std::int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  auto ready = ready_event(input);
  MPI_Comm comm = comm_;
  return collective(OpKind::all_to_all, &input, ReduceOp::sum, -1,
                    [=, sc = ints(p.send_counts), so = ints(p.send_offsets),
                     rc = ints(p.recv_counts), ro = ints(p.recv_offsets)]() -> Poll {
    MPI_Datatype type = mpi_datatype(input.dtype());
    Staged in(input, true, pool_, ready);
    Staged out(output, false, pool_, ready);
    MGPU_MPI_CHECK(MPI_Alltoallv(in.data(), sc.data(), so.data(), type, out.data(), rc.data(),
                                 ro.data(), type, comm));
    out.copy_out();
    return nullptr;
  });
}

Work MpiGroup::barrier() {
  MPI_Comm comm = comm_;
  return collective(OpKind::barrier, nullptr, ReduceOp::sum, -1, [=]() -> Poll {
    MGPU_MPI_CHECK(MPI_Barrier(comm));
    return nullptr;
  });
}

Work MpiGroup::send(const Tensor& t, int dst, int tag) {
  return batch_isend_irecv({P2POp::isend(t, dst, tag)});
}

Work MpiGroup::recv(const Tensor& t, int src, int tag) {
  return batch_isend_irecv({P2POp::irecv(t, src, tag)});
}

Work MpiGroup::batch_isend_irecv(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Work();
  std::vector<std::shared_ptr<Event>> ready;
  for (const P2POp& o : ops) {
    const char* name = o.kind == P2POp::Kind::send ? "send" : "recv";
    check_tensor(name, o.tensor);
    check_rank(name, o.peer, size(), o.kind == P2POp::Kind::send ? "destination" : "source");
    MGPU_CHECK(o.tag >= 0 && o.tag <= 32767, name, ": tag ", o.tag, " must be in 0..32767");
    mpi_count(o.tensor.numel(), name);
    ready.push_back(ready_event(o.tensor));
  }
  MPI_Comm comm = comm_;
  auto start = [=]() -> Poll {
    // Post every message, then report completion once all of them have finished.
    auto staged = std::make_shared<std::vector<std::unique_ptr<Staged>>>();
    auto requests = std::make_shared<std::vector<MPI_Request>>(ops.size(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const P2POp& o = ops[i];
      bool is_send = o.kind == P2POp::Kind::send;
      staged->push_back(std::make_unique<Staged>(o.tensor, is_send, pool_, ready[i]));
      void* buf = staged->back()->data();
      int n = static_cast<int>(o.tensor.numel());
      MPI_Datatype type = mpi_datatype(o.tensor.dtype());
      if (is_send) {
        MGPU_MPI_CHECK(MPI_Isend(buf, n, type, o.peer, o.tag, comm, &(*requests)[i]));
      } else {
        MGPU_MPI_CHECK(MPI_Irecv(buf, n, type, o.peer, o.tag, comm, &(*requests)[i]));
      }
    }
    return [=]() -> bool {
      int done = 0;
      std::vector<MPI_Status> status(requests->size());
      int rc = MPI_Testall(static_cast<int>(requests->size()), requests->data(), &done, status.data());
      if (rc == MPI_ERR_IN_STATUS) {
        for (std::size_t i = 0; i < status.size(); ++i)
          if (status[i].MPI_ERROR != MPI_SUCCESS)
            MGPU_FAIL(ops[i].kind == P2POp::Kind::send ? "send to rank " : "recv from rank ",
                      ops[i].peer, " of ", ops[i].tensor.str(), " failed: ",
                      mpi_error_string(status[i].MPI_ERROR),
                      " (a larger message than the receive tensor?)");
      }
      MGPU_MPI_CHECK(rc);
      if (!done) return false;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].kind != P2POp::Kind::recv) continue;
        check_received(status[i], ops[i].tensor, ops[i].peer);
        (*staged)[i]->copy_out();
      }
      return true;
    };
  };
  return p2p(ops, start);
}

}  // namespace mgpu::dist::detail
