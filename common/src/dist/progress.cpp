// The progress board and the group registry (see progress.h).
//
// Why a shared-memory window per node and not one over the world: MPI_Win_allocate_shared
// always gets Open MPI's shared-memory component, which needs no help from the rank being
// read. A window over several nodes would need an RDMA network; over TCP, Open MPI 4.1's
// fallback refuses MPI_THREAD_MULTIPLE and prints a warning at every start. Ranks on other
// nodes are therefore not readable, and the messages say so.
#include "progress.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <utility>

#include "mgpu/dist/runtime.h"
#include "mpi_util.h"

namespace mgpu::dist::detail {
namespace {

// A rank's record: a header, then one slot per tracked group.
constexpr int kFinalizing = 0, kLatestGroup = 1, kHeader = 2;
// A slot: issued, done, kind, dtype, reduce, root, has_tensor, ndim, dims...
constexpr int kIssued = 0, kDone = 1, kKind = 2, kDtype = 3, kReduce = 4, kRoot = 5,
              kHasTensor = 6, kNdim = 7, kDims = 8, kMaxDims = 4, kSlot = kDims + kMaxDims;
constexpr int kRecord = kHeader + kTrackedGroups * kSlot;

struct Board {
  std::mutex mutex;  // one MPI lock at a time in this process; guards everything below
  MPI_Win win = MPI_WIN_NULL;
  int my_node_rank = 0;
  std::vector<int> node_rank_of;    // world rank -> rank on this node's board, or -1
  std::vector<std::int64_t> local;  // this rank's record, as published
  std::int64_t* shared = nullptr;   // this rank's record in the window
  std::string missing = "dist::init() has not run";
  std::vector<std::vector<int>> groups;  // the registry: world ranks by group id
};

Board& board() {
  static Board b;
  return b;
}

int slot(int group) { return kHeader + group * kSlot; }

// Copies the ranges local[first, first + n) into the window in one lock epoch, so a reader
// sees all of them or none (caller holds the mutex).
void publish(Board& b, std::initializer_list<std::pair<int, int>> ranges) {
  if (b.win == MPI_WIN_NULL) return;
  // A rank may store into its own window memory inside an exclusive lock epoch on itself.
  if (MPI_Win_lock(MPI_LOCK_EXCLUSIVE, b.my_node_rank, 0, b.win) != MPI_SUCCESS) return;
  for (const auto& [first, n] : ranges)
    std::memcpy(b.shared + first, b.local.data() + first, sizeof(std::int64_t) * n);
  MPI_Win_unlock(b.my_node_rank, b.win);
}

RankProgress decode(const std::vector<std::int64_t>& rec) {
  RankProgress p;
  p.readable = true;
  p.finalizing = rec[kFinalizing] != 0;
  p.latest_group = static_cast<int>(rec[kLatestGroup]);
  p.groups.resize(kTrackedGroups);
  for (int g = 0; g < kTrackedGroups; ++g) {
    const std::int64_t* s = rec.data() + slot(g);
    GroupProgress& gp = p.groups[g];
    gp.issued = s[kIssued];
    gp.done = s[kDone];
    OpSignature& o = gp.latest;
    o.group = g;
    o.seq = s[kIssued];
    o.kind = static_cast<OpKind>(s[kKind]);
    o.dtype = static_cast<DType>(s[kDtype]);
    o.reduce = static_cast<ReduceOp>(s[kReduce]);
    o.root = static_cast<int>(s[kRoot]);
    o.has_tensor = s[kHasTensor] != 0;
    o.shape.assign(s + kDims, s + kDims + std::clamp<std::int64_t>(s[kNdim], 0, kMaxDims));
  }
  return p;
}

}  // namespace

const GroupProgress* RankProgress::on(int id) const {
  return id >= 0 && id < static_cast<int>(groups.size()) ? &groups[id] : nullptr;
}

void start_progress_board(MPI_Comm node) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.groups.clear();
  b.local.assign(kRecord, 0);
  b.local[kLatestGroup] = -1;
  MPI_Comm_rank(node, &b.my_node_rank);
  // Where each world rank sits on this node's board.
  MPI_Group world_group, node_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(node, &node_group);
  std::vector<int> world(static_cast<std::size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) world[r] = r;
  b.node_rank_of.assign(world.size(), MPI_UNDEFINED);
  MPI_Group_translate_ranks(world_group, world_size(), world.data(), node_group,
                            b.node_rank_of.data());
  MPI_Group_free(&world_group);
  MPI_Group_free(&node_group);

  void* base = nullptr;
  int rc = MPI_Win_allocate_shared(sizeof(std::int64_t) * kRecord, sizeof(std::int64_t),
                                   MPI_INFO_NULL, node, &base, &b.win);
  if (rc != MPI_SUCCESS) {
    b.win = MPI_WIN_NULL;
    b.missing = "MPI could not create the shared-memory window: " + mpi_error_string(rc);
    return;
  }
  MPI_Win_set_errhandler(b.win, MPI_ERRORS_RETURN);
  b.shared = static_cast<std::int64_t*>(base);
  b.missing.clear();
  publish(b, {{0, kRecord}});
}

void stop_progress_board() {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.win != MPI_WIN_NULL) MPI_Win_free(&b.win);
  b.win = MPI_WIN_NULL;
  b.shared = nullptr;
  b.missing = "dist::finalize() has run";
}

void mark_finalizing() {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty()) return;
  b.local[kFinalizing] = 1;
  publish(b, {{kFinalizing, 1}});
}

std::string progress_board_missing() {
  std::lock_guard<std::mutex> lock(board().mutex);
  return board().missing;
}

int register_group_members(const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(board().mutex);
  board().groups.push_back(members);
  return static_cast<int>(board().groups.size()) - 1;
}

int registered_groups() {
  std::lock_guard<std::mutex> lock(board().mutex);
  return std::min(static_cast<int>(board().groups.size()), kTrackedGroups);
}

std::vector<int> group_members(int id) {
  std::lock_guard<std::mutex> lock(board().mutex);
  const auto& g = board().groups;
  return id >= 0 && id < static_cast<int>(g.size()) ? g[id] : std::vector<int>{};
}

std::string group_label(int id) {
  std::vector<int> m = group_members(id);
  std::string text = "group " + std::to_string(id);
  if (m.empty()) return text;
  if (static_cast<int>(m.size()) == world_size())
    return text + " (world, " + std::to_string(m.size()) + (m.size() == 1 ? " rank)" : " ranks)");
  constexpr std::size_t kShown = 8;
  text += " (ranks ";
  for (std::size_t i = 0; i < std::min(m.size(), kShown); ++i)
    text += (i ? ", " : "") + std::to_string(m[i]);
  if (m.size() > kShown) text += ", … (" + std::to_string(m.size()) + " ranks)";
  return text + ")";
}

OpSignature as_published(OpSignature sig) {
  if (sig.shape.size() > kMaxDims) sig.shape = Shape{shape_numel(sig.shape)};
  return sig;
}

void note_issued(const OpSignature& sig, std::vector<std::int64_t>* counts) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty()) return;
  if (counts) {
    counts->resize(kTrackedGroups);
    for (int g = 0; g < kTrackedGroups; ++g) (*counts)[g] = b.local[slot(g) + kIssued];
  }
  if (sig.group < 0 || sig.group >= kTrackedGroups) return;
  std::int64_t* s = b.local.data() + slot(sig.group);
  const Shape shape = as_published(sig).shape;
  s[kIssued] = sig.seq;
  s[kKind] = static_cast<std::int64_t>(sig.kind);
  s[kDtype] = static_cast<std::int64_t>(sig.dtype);
  s[kReduce] = static_cast<std::int64_t>(sig.reduce);
  s[kRoot] = sig.root;
  s[kHasTensor] = sig.has_tensor;
  s[kNdim] = static_cast<std::int64_t>(shape.size());
  std::copy(shape.begin(), shape.end(), s + kDims);
  b.local[kLatestGroup] = sig.group;
  publish(b, {{kLatestGroup, 1}, {slot(sig.group), kSlot}});
}

void note_done(const OpSignature& sig) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty() || sig.group < 0 || sig.group >= kTrackedGroups) return;
  std::int64_t& done = b.local[slot(sig.group) + kDone];
  done = std::max(done, sig.seq);
  publish(b, {{slot(sig.group) + kDone, 1}});
}

RankProgress read_progress(int r) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (r == rank() && !b.local.empty()) return decode(b.local);
  if (b.win == MPI_WIN_NULL || r < 0 || r >= static_cast<int>(b.node_rank_of.size()) ||
      b.node_rank_of[r] == MPI_UNDEFINED)
    return {};
  std::vector<std::int64_t> rec(kRecord);
  const int target = b.node_rank_of[r];
  if (MPI_Win_lock(MPI_LOCK_SHARED, target, 0, b.win) != MPI_SUCCESS) return {};
  int rc = MPI_Get(rec.data(), kRecord, MPI_INT64_T, target, 0, kRecord, MPI_INT64_T, b.win);
  MPI_Win_unlock(target, b.win);
  if (rc != MPI_SUCCESS) return {};
  return decode(rec);
}

}  // namespace mgpu::dist::detail
