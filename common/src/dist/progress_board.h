// Private: the progress board, a side channel the ranks of a node read from each other when
// a collective hangs, and the world-wide registry of groups it is indexed by.
//
// Every rank publishes, per group, the sequence number and signature of the latest
// collective it issued and the number of the latest one that completed. The board is an
// MPI shared-memory window over the node's ranks: a rank reads another's record with a
// passive-target MPI_Get, which needs nothing from the rank it reads, so it works while
// that rank is stuck in its own code or in another group's collective.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine.h"
#include "mpi_include.h"

namespace mgpu::dist::detail {

/// Groups with an id below this are tracked on the board and in the debug mode's
/// cross-group check; later ones are not (a program rarely makes this many).
constexpr int kTrackedGroups = 256;

/// What a rank has published about one group.
struct GroupProgress {
  std::int64_t issued = 0;  ///< seq of the latest collective it issued there (0: none)
  std::int64_t done = 0;    ///< seq of the latest one that completed on it
  OpSignature latest;       ///< the collective numbered `issued`
};

/// A rank's record, as read from the board.
struct RankProgress {
  bool readable = false;    ///< false: the rank is on another node, or there is no board
  bool finalizing = false;  ///< it has entered dist::finalize()
  int latest_group = -1;    ///< group of the latest collective it issued (-1: none)
  std::int64_t pid = 0;     ///< its process id (0: unknown)
  bool ending = false;      ///< it is ending the job on a timeout (mark_ending_job)
  int culprit = -1;         ///< the rank its timeout named as stopped or gone (-1: none)
  bool culprit_stopped = false;  ///< that rank was stopped (else it had exited)
  std::vector<GroupProgress> groups;  ///< by group id; kTrackedGroups entries when readable
  /// Its oldest point-to-point op in flight (posted, not completed), or where none is the
  /// last one it posted: kind send, recv or batch_p2p, its group, peer and tag (a batch's
  /// first messages); seq 0: none posted yet.
  OpSignature p2p;
  bool p2p_done = false;  ///< `p2p` has completed (nothing is in flight)
  /// The last messages it sent, oldest first: (group, the message).
  std::vector<std::pair<int, OpSignature::Message>> sent;
  /// The record of group `id`, or nullptr when it is not tracked.
  const GroupProgress* on(int id) const;
};

/// init(): creates the board (collective over the node). Without one, messages say so.
void start_progress_board(MPI_Comm node);
/// finalize(): frees the board (collective over the node).
void stop_progress_board();
/// Published when this rank enters dist::finalize().
void mark_finalizing();
/// Published when this rank ends the job on a timeout: `culprit` is the rank its message
/// named as stopped (`stopped`) or gone (-1: none), for the messages of ranks whose timeouts
/// fire later, when the job's end may have resumed or killed that rank.
void mark_ending_job(int culprit, bool stopped);
/// Why there is no board ("" when there is one).
std::string progress_board_missing();

/// new_group(): the next group id, the same on every rank because every rank creates its
/// groups in the same order. `members` are the group's world ranks, sorted.
int register_group_members(const std::vector<int>& members);
/// How many tracked groups exist so far (ids 0 .. this - 1; at most kTrackedGroups).
int registered_groups();
/// The world ranks of group `id` (empty for an unknown id).
std::vector<int> group_members(int id);
/// "group 0 (world, 3 ranks)" or "group 2 (ranks 0, 2)".
std::string group_label(int id);

/// A signature as the board holds it: a shape of more than 4 dimensions becomes its element
/// count (compare another rank's published op with this one after this).
OpSignature as_published(OpSignature sig);
/// Publishes that this rank issued collective `sig` on group sig.group. With `counts`, also
/// returns how many collectives this rank had issued on each tracked group before it.
void note_issued(const OpSignature& sig, std::vector<std::int64_t>* counts);
/// Always on, for a collective this rank issued: compares its kind, dtype, reduce op, root
/// and element count with what the group's other members on this node issued as the same
/// number (read in place from the board, no MPI call). Throws mgpu::Error with PyTorch's
/// words ("Detected mismatch between collectives on ranks. Rank 0 is running collective:
/// ..., but Rank 1 is running collective: ...") on a difference. Returns how many members
/// have not issued it yet (to compare again later); ranks on other nodes are not compared.
int compare_with_peers(const OpSignature& sig);
/// Publishes that collective `sig` completed (or failed) on this rank.
void note_done(const OpSignature& sig);
/// Records group `group`'s oldest point-to-point op in flight on this rank (nullptr: none)
/// and publishes one of the groups' (the latest recorded, else any other still in flight),
/// so that a peer waiting on this rank can say what it waits in.
void note_p2p_in_flight(int group, const OpSignature* sig);
/// Publishes the messages a send or batch posts (the last few are kept), so that a peer
/// whose receive waits with another tag can name the tags sent.
void note_sent(const OpSignature& sig);
/// The record of world rank `r` (this rank's own comes from memory).
RankProgress read_progress(int r);

}  // namespace mgpu::dist::detail
