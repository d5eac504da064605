// The progress board and the group registry (see progress_board.h).
//
// Why a shared-memory window per node and not one over the world: MPI_Win_allocate_shared
// always gets Open MPI's shared-memory component, which needs no help from the rank being
// read. A window over several nodes would need an RDMA network; over TCP, Open MPI 4.1's
// fallback refuses MPI_THREAD_MULTIPLE and prints a warning at every start. Ranks on other
// nodes are therefore not readable, and the messages say so.
#include "progress_board.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <unistd.h>
#include <utility>

#include "mgpu/dist/runtime.h"
#include "mpi_util.h"

namespace mgpu::dist::detail {
namespace {

// A rank's record: a header, then one slot per tracked group. The header's end holds the
// rank's oldest point-to-point op in flight, or, when none is, the last one it posted: its
// group, seq, kind and peer (batch: -1), tag, whether it completed, then up to kP2pShown
// messages of a batch (send, peer, tag, dtype, element count each). Then the last kSentKept
// messages it sent, in a ring (group, peer, tag, dtype, element count each; kSentNext counts
// them all): a send that has completed is gone from the ops in flight, but a receive that
// waits for it with another tag needs its tag named. Last, whether the rank is ending the
// job on a timeout and the rank its message named as stopped or gone (world rank + 1; 0:
// none), which a rank whose own timeout fires later reads.
constexpr int kFinalizing = 0, kLatestGroup = 1, kPid = 2, kP2pGroup = 3, kP2pSeq = 4,
              kP2pKind = 5, kP2pPeer = 6, kP2pTag = 7, kP2pDone = 8, kP2pCount = 9, kP2pMessages = 10,
              kP2pShown = 4, kP2pWords = 5, kSentNext = kP2pMessages + kP2pShown * kP2pWords,
              kSentFirst = kSentNext + 1, kSentKept = 8, kSentWords = 5,
              kEnding = kSentFirst + kSentKept * kSentWords, kCulprit = kEnding + 1,
              kHeader = kCulprit + 1;
// A slot: issued, done, kind, dtype, reduce, root, has_tensor, ndim, dims...
constexpr int kIssued = 0, kDone = 1, kKind = 2, kDtype = 3, kReduce = 4, kRoot = 5,
              kHasTensor = 6, kNdim = 7, kDims = 8, kMaxDims = 4, kSlot = kDims + kMaxDims;
constexpr int kRecord = kHeader + kTrackedGroups * kSlot;

// After the record, read only in place by the ranks of the node: each rank's last
// kHistory collectives per tracked group, an entry per sequence number modulo kHistory
// (seq, what, root, numel), written and read with atomics (a sequence lock: seq is 0 while
// the entry changes), so the always-on comparison costs a few loads per peer and no MPI call.
constexpr int kHistory = 16, kEntry = 4;
constexpr int kWhat = 1, kEntryRoot = 2, kNumel = 3;
constexpr int kHistoryWords = kTrackedGroups * kHistory * kEntry;

int entry(int group, std::int64_t seq) {
  return kRecord + (group * kHistory + static_cast<int>(seq % kHistory)) * kEntry;
}

bool reduces(OpKind k) {
  return k == OpKind::all_reduce || k == OpKind::reduce || k == OpKind::reduce_scatter;
}
bool has_root(OpKind k) { return k == OpKind::broadcast || k == OpKind::reduce; }

// What every member must agree on: kind, dtype, reduce op (of reducing ops), root (of
// rooted ones) and element count (a shape's dimensions may legitimately differ only where
// the debug mode's full comparison would say so).
std::int64_t what_word(const OpSignature& s) {
  return static_cast<std::int64_t>(s.kind) | static_cast<std::int64_t>(s.dtype) << 8 |
         static_cast<std::int64_t>(reduces(s.kind) ? s.reduce : ReduceOp::sum) << 16 |
         static_cast<std::int64_t>(s.has_tensor) << 24;
}
std::int64_t root_word(const OpSignature& s) { return has_root(s.kind) ? s.root : -1; }
std::int64_t numel_word(const OpSignature& s) { return s.has_tensor ? shape_numel(s.shape) : 0; }

// A peer's entry as a signature, for the message (its shape as its element count).
OpSignature entry_signature(std::int64_t seq, std::int64_t what, std::int64_t root,
                            std::int64_t numel, int group) {
  OpSignature o;
  o.seq = seq;
  o.group = group;
  o.kind = static_cast<OpKind>(what & 0xff);
  o.dtype = static_cast<DType>((what >> 8) & 0xff);
  o.reduce = static_cast<ReduceOp>((what >> 16) & 0xff);
  o.has_tensor = ((what >> 24) & 1) != 0;
  o.root = static_cast<int>(root);
  if (o.has_tensor) o.shape = Shape{numel};
  return o;
}

struct Board {
  std::mutex mutex;  // one MPI lock at a time in this process; guards everything below
  MPI_Win win = MPI_WIN_NULL;
  int my_node_rank = 0;
  std::vector<int> node_rank_of;    // world rank -> rank on this node's board, or -1
  std::vector<std::int64_t> local;  // this rank's record, as published
  std::int64_t* shared = nullptr;   // this rank's record in the window
  std::string missing = "dist::init() has not run";
  std::vector<std::vector<int>> groups;  // the registry: world ranks by group id
  // Every rank's window memory on this node, by world rank (nullptr: another node).
  std::vector<std::int64_t*> peer_base;
  std::vector<std::int64_t> pid_of;  // by world rank, from the board (0: unknown)
  std::map<int, OpSignature> p2p_in_flight;  // by group: its oldest p2p op in flight
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
  p.pid = rec[kPid];
  p.ending = rec[kEnding] != 0;
  p.culprit = static_cast<int>(rec[kCulprit] / 2) - 1;
  p.culprit_stopped = rec[kCulprit] % 2 != 0;
  p.p2p.seq = rec[kP2pSeq];
  if (p.p2p.seq > 0) {
    p.p2p.group = static_cast<int>(rec[kP2pGroup]);
    p.p2p.kind = static_cast<OpKind>(rec[kP2pKind]);
    p.p2p.root = static_cast<int>(rec[kP2pPeer]);
    p.p2p.tag = static_cast<int>(rec[kP2pTag]);
    p.p2p_done = rec[kP2pDone] != 0;
    const int n = static_cast<int>(std::clamp<std::int64_t>(rec[kP2pCount], 0, kP2pShown));
    for (int i = 0; i < n; ++i) {
      const std::int64_t* m = rec.data() + kP2pMessages + i * kP2pWords;
      OpSignature::Message msg;
      msg.send = m[0] != 0;
      msg.peer = static_cast<int>(m[1]);
      msg.tag = static_cast<int>(m[2]);
      msg.dtype = static_cast<DType>(m[3]);
      msg.numel = m[4];
      p.p2p.messages.push_back(msg);
    }
  }
  const std::int64_t sent = rec[kSentNext];
  for (std::int64_t n = std::max<std::int64_t>(0, sent - kSentKept); n < sent; ++n) {
    const std::int64_t* e = rec.data() + kSentFirst + static_cast<int>(n % kSentKept) * kSentWords;
    p.sent.push_back({static_cast<int>(e[0]), {true, static_cast<int>(e[1]), static_cast<int>(e[2]),
                                               static_cast<DType>(e[3]), e[4]}});
  }
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
  b.local[kPid] = static_cast<std::int64_t>(getpid());
  b.peer_base.assign(world.size(), nullptr);
  int rc = MPI_Win_allocate_shared(sizeof(std::int64_t) * (kRecord + kHistoryWords),
                                   sizeof(std::int64_t), MPI_INFO_NULL, node, &base, &b.win);
  if (rc != MPI_SUCCESS) {
    b.win = MPI_WIN_NULL;
    b.missing = "MPI could not create the shared-memory window: " + mpi_error_string(rc);
    return;
  }
  MPI_Win_set_errhandler(b.win, MPI_ERRORS_RETURN);
  b.shared = static_cast<std::int64_t*>(base);
  std::fill(b.shared + kRecord, b.shared + kRecord + kHistoryWords, 0);
  b.missing.clear();
  publish(b, {{0, kRecord}});
  for (int r = 0; r < world_size(); ++r) {
    if (b.node_rank_of[r] == MPI_UNDEFINED) continue;
    MPI_Aint size = 0;
    int disp = 0;
    void* peer = nullptr;
    if (MPI_Win_shared_query(b.win, b.node_rank_of[r], &size, &disp, &peer) == MPI_SUCCESS &&
        size >= static_cast<MPI_Aint>(sizeof(std::int64_t) * (kRecord + kHistoryWords)))
      b.peer_base[r] = static_cast<std::int64_t*>(peer);
  }
  // Every rank's history zeroed before any rank issues a collective.
  MPI_Barrier(node);
}

void stop_progress_board() {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.win != MPI_WIN_NULL) MPI_Win_free(&b.win);
  b.win = MPI_WIN_NULL;
  b.shared = nullptr;
  b.peer_base.clear();
  b.missing = "dist::finalize() has run";
}

void mark_finalizing() {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty()) return;
  b.local[kFinalizing] = 1;
  publish(b, {{kFinalizing, 1}});
}

void mark_ending_job(int culprit, bool stopped) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty()) return;
  b.local[kEnding] = 1;
  b.local[kCulprit] = (culprit + 1) * 2 + (stopped ? 1 : 0);
  publish(b, {{kEnding, 2}});
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
  if (b.shared && sig.is_collective()) {
    std::int64_t* e = b.shared + entry(sig.group, sig.seq);
    __atomic_store_n(&e[0], std::int64_t{0}, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&e[kWhat], what_word(sig), __ATOMIC_RELAXED);
    __atomic_store_n(&e[kEntryRoot], root_word(sig), __ATOMIC_RELAXED);
    __atomic_store_n(&e[kNumel], numel_word(sig), __ATOMIC_RELAXED);
    __atomic_store_n(&e[0], sig.seq, __ATOMIC_RELEASE);
  }
}

void note_p2p_in_flight(int group, const OpSignature* in_flight) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty()) return;
  if (in_flight)
    b.p2p_in_flight[group] = *in_flight;
  else
    b.p2p_in_flight.erase(group);
  const OpSignature* sig = in_flight ? in_flight
                           : b.p2p_in_flight.empty() ? nullptr
                                                     : &b.p2p_in_flight.begin()->second;
  if (!sig) {  // nothing in flight: the last op posted stays, marked completed
    b.local[kP2pDone] = 1;
    publish(b, {{kP2pDone, 1}});
    return;
  }
  std::fill(b.local.begin() + kP2pGroup, b.local.begin() + kSentNext, 0);
  {
    b.local[kP2pGroup] = sig->group;
    b.local[kP2pSeq] = std::max<std::int64_t>(1, sig->seq);
    b.local[kP2pKind] = static_cast<std::int64_t>(sig->kind);
    b.local[kP2pPeer] = sig->root;
    b.local[kP2pTag] = sig->tag;
    const int n = std::min<int>(static_cast<int>(sig->messages.size()), kP2pShown);
    b.local[kP2pCount] = n;
    for (int i = 0; i < n; ++i) {
      std::int64_t* m = b.local.data() + kP2pMessages + i * kP2pWords;
      m[0] = sig->messages[static_cast<std::size_t>(i)].send;
      m[1] = sig->messages[static_cast<std::size_t>(i)].peer;
      m[2] = sig->messages[static_cast<std::size_t>(i)].tag;
      m[3] = static_cast<std::int64_t>(sig->messages[static_cast<std::size_t>(i)].dtype);
      m[4] = sig->messages[static_cast<std::size_t>(i)].numel;
    }
  }
  publish(b, {{kP2pGroup, kSentNext - kP2pGroup}});
}

void note_sent(const OpSignature& sig) {
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.local.empty() || sig.group < 0) return;
  std::vector<OpSignature::Message> sent;
  if (sig.kind == OpKind::send) sent.push_back({true, sig.root, sig.tag, sig.dtype, shape_numel(sig.shape)});
  for (const auto& m : sig.messages)
    if (m.send) sent.push_back(m);
  if (sent.empty()) return;
  for (const auto& m : sent) {
    const std::int64_t n = b.local[kSentNext]++;
    std::int64_t* e = b.local.data() + kSentFirst + static_cast<int>(n % kSentKept) * kSentWords;
    e[0] = sig.group;
    e[1] = m.peer;
    e[2] = m.tag;
    e[3] = static_cast<std::int64_t>(m.dtype);
    e[4] = m.numel;
  }
  publish(b, {{kSentNext, kEnding - kSentNext}});
}

int compare_with_peers(const OpSignature& sig) {
  Board& b = board();
  if (!sig.is_collective() || sig.group < 0 || sig.group >= kTrackedGroups) return 0;
  const std::int64_t mine[3] = {what_word(sig), root_word(sig), numel_word(sig)};
  int unseen = 0, other_rank = -1;
  OpSignature other;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    if (!b.shared || sig.group >= static_cast<int>(b.groups.size())) return 0;
    const int me = rank();
    for (int r : b.groups[sig.group]) {
      const std::int64_t* base = r == me ? nullptr : b.peer_base[r];
      if (!base) continue;
      const std::int64_t* e = base + entry(sig.group, sig.seq);
      const std::int64_t seq = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
      const std::int64_t theirs[3] = {__atomic_load_n(&e[kWhat], __ATOMIC_RELAXED),
                                      __atomic_load_n(&e[kEntryRoot], __ATOMIC_RELAXED),
                                      __atomic_load_n(&e[kNumel], __ATOMIC_RELAXED)};
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (seq != sig.seq || __atomic_load_n(&e[0], __ATOMIC_RELAXED) != seq) {
        // Not issued there yet (or being written); an entry kHistory collectives ahead
        // already has replaced this one, and is not waited for.
        if (seq < sig.seq) ++unseen;
        continue;
      }
      if (std::equal(mine, mine + 3, theirs)) continue;
      other_rank = r;
      other = entry_signature(seq, theirs[0], theirs[1], theirs[2], sig.group);
      break;
    }
  }
  if (other_rank < 0) return unseen;
  OpSignature self = sig;
  self.backend.clear();
  MGPU_FAIL("Detected mismatch between collectives on ranks. Rank ", rank(),
            " is running collective: ", self.describe(), ", but Rank ", other_rank,
            " is running collective: ", other.describe(), " (", sig.backend, " backend, ",
            group_label(sig.group), "). Every rank must issue the same collectives in the same "
            "order with the same dtypes, element counts and reduce ops; the result here would "
            "be wrong, so the op fails");
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
