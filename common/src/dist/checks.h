// Private: argument checks shared by the backends (thrown on the calling thread, at issue
// time, so the error points at the caller's line), the debug-mode comparison, and options.
#pragma once

#include "mpi_include.h"

#include "engine.h"
#include "mgpu/dist/all_to_all.h"
#include "mgpu/dist/process_group.h"

namespace mgpu::dist::detail {

void check_tensor(const char* op, const Tensor& t, const char* what = "tensor");
/// avg needs a floating dtype (integer division would silently truncate).
void check_reduce_op(const char* op, const Tensor& t, ReduceOp r);
void check_rank(const char* op, int r, int size, const char* what);
/// For all_gather / reduce_scatter: big.numel() == size * small.numel(), same dtype.
void check_split(const char* op, const Tensor& big, const char* big_name, const Tensor& small,
                 const char* small_name, int size);
/// An all_to_all's pieces and their check are public (mgpu/dist/all_to_all.h: lesson 04's
/// all-to-all by hand cuts its tensors with them too).
using dist::AllToAllPieces;
using dist::all_to_all_pieces;
/// True when the element ranges of a and b overlap in memory.
bool overlaps(const Tensor& a, const Tensor& b);
/// For all_gather / reduce_scatter: true when `chunk` is `whole`'s chunk `rank` (the
/// in-place form); throws when it overlaps `whole` anywhere else.
bool check_chunk_in_place(const char* op, const Tensor& chunk, const char* chunk_name,
                          const Tensor& whole, const char* whole_name, int rank);

OpSignature make_signature(OpKind kind, std::int64_t seq, const Tensor* t, ReduceOp r,
                           int root, const std::string& backend, int group);
/// The signature of point-to-point messages posted together: a send or recv with its peer
/// and tag for one message, a batch_isend_irecv listing its messages for several.
OpSignature p2p_signature(const std::vector<P2POp>& ops, std::int64_t seq,
                          const std::string& backend, int group);
/// The signature of a batch_isend_irecv of `ops` (any number, one included).
OpSignature batch_p2p_signature(const std::vector<P2POp>& ops, std::int64_t seq,
                                const std::string& backend, int group);

/// Debug mode: every rank sends its signature of the next collective to every other; if
/// any differs from rank 0's, or two members' orders differ on a group they share, every
/// rank throws the same mgpu::Error naming both. While it waits, a rank that issued another
/// group's collective first (seen on the progress board) ends the job with both named.
void check_same_collective(MPI_Comm comm, const OpSignature& sig, double timeout_s);

/// options.timeout_s / options.debug with the environment's defaults filled in.
double resolve_timeout(const GroupOptions& o);
bool resolve_debug(const GroupOptions& o);

}  // namespace mgpu::dist::detail
