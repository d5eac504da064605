// Reading the progress board when a collective hangs (see diagnose.h).
#include "diagnose.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "mgpu/dist/runtime.h"
#include "diagnose_p2p.h"
#include "diagnose_rank.h"
#include "progress_board.h"

namespace mgpu::dist::detail {
namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

bool same_op(const OpSignature& a, const OpSignature& b) {
  return a.kind == b.kind && a.has_tensor == b.has_tensor && a.dtype == b.dtype &&
         a.shape == b.shape && a.reduce == b.reduce && a.root == b.root;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// The rank to publish as the cause (mark_ending_job): of the ranks `named`, the first whose
// process is stopped, else the first that has exited without ending the job itself.
std::pair<int, bool> culprit_of(const std::vector<int>& named) {
  int gone = -1;
  for (int r : named) {
    const RankProgress p = read_progress(r);
    const std::string state = process_state(r, p);
    if (state.find(" is stopped") != std::string::npos) return {r, true};
    if (gone < 0 && state.find(" has exited") != std::string::npos) gone = r;
  }
  return {gone, false};
}

// A rank whose timeout fired first and is ending the job: what it found. Read by a rank
// whose own timeout fires while the job ends, when mpirun has already resumed (SIGCONT) or
// ended the rank that held everyone up. Sets `me_culprit` when that rank is this one.
std::string ended_first(bool& me_culprit) {
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank()) continue;
    const RankProgress p = read_progress(r);
    if (!p.readable || !p.ending) continue;
    std::string text = "rank " + std::to_string(r) + " ended the job first, on its timeout";
    if (p.culprit == rank()) {
      me_culprit = true;
      return text + ", having found this rank " +
             (p.culprit_stopped ? "stopped; the job's end resumed it" : "gone");
    }
    if (p.culprit >= 0) {
      const RankProgress c = read_progress(p.culprit);
      text += ", having found rank " + std::to_string(p.culprit) +
              (c.pid > 0 ? " (process " + std::to_string(c.pid) + ")" : "") +
              (p.culprit_stopped ? " stopped" : " gone");
    }
    return text;
  }
  return "";
}

// The ranks of this node, other than this one and those in `named`, whose process is stopped
// or has exited (added to `named`): a rank that waits for a running peer may in truth wait
// for one of them, further down a chain of waits. "" when there is none.
std::string stopped_elsewhere(std::vector<int>& named) {
  std::string text;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank() || contains(named, r)) continue;
    const RankProgress p = read_progress(r);
    if (!p.readable || p.ending) continue;  // a rank ending the job is a consequence
    const std::string state = process_state(r, p);
    if (state.empty()) continue;
    text += (text.empty() ? "" : "; ") + state;
    named.push_back(r);
  }
  return text.empty() ? "" : "the likely cause, further down the chain of waits: " + text;
}

// For a collective: which members have not reached it, and what each did instead. Adds to
// `named` the ranks whose process state it gives.
std::string who_is_behind(const OpSignature& sig, std::vector<int>& named) {
  if (sig.group >= kTrackedGroups)
    return group_label(sig.group) + " is not tracked (only the first " +
           std::to_string(kTrackedGroups) + " groups are)";
  const std::vector<int> members = group_members(sig.group);
  std::vector<std::string> parts;
  std::vector<int> unread;
  for (int r : members) {
    if (r == rank()) continue;
    RankProgress p = read_progress(r);
    const GroupProgress* g = p.on(sig.group);
    if (!p.readable || !g) {
      unread.push_back(r);
    } else if (g->issued < sig.seq) {
      const std::string state = process_state(r, p);
      if (!state.empty()) named.push_back(r);
      parts.push_back((state.empty() ? "rank " + std::to_string(r) : state + " and") +
                      " has not reached it (" + whereabouts(p, sig.group) + ")");
    } else if (g->issued == sig.seq && !same_op(g->latest, as_published(sig))) {
      parts.push_back("rank " + std::to_string(r) + " issued " + describe_theirs(g->latest) +
                      " there instead");
    } else {
      // It issued this one (or later ones): stuck inside it only if it cannot run.
      const std::string state = process_state(r, p);
      if (!state.empty()) {
        parts.push_back(state + " inside it");
        named.push_back(r);
      }
    }
  }
  if (parts.empty())
    parts.push_back(unread.size() + 1 == members.size()
                        ? std::string("no other rank's progress could be read")
                        : "every rank read here has issued it, so one is stuck inside it (or "
                          "they disagree on its shape: MGPU_DIST_DEBUG=1 compares)");
  if (!unread.empty())
    parts.push_back(rank_list(unread) + " cannot be read from here (another node)");
  std::string text;
  for (const auto& s : parts) text += (text.empty() ? "" : "; ") + s;
  return text;
}

}  // namespace

std::string timeout_message(const OpSignature& sig, double timeout_s) {
  std::ostringstream os;
  os << "mgpu::dist timeout: " << sig.describe();
  if (sig.group >= 0) os << " on " << group_label(sig.group);
  os << " did not complete within " << timeout_s << " s";
  std::string missing = progress_board_missing();
  std::string detail;
  std::vector<int> named;
  bool me_culprit = false;
  const std::string first = missing.empty() ? ended_first(me_culprit) : "";
  if (!missing.empty()) {
    detail = "the other ranks' progress cannot be read (" + missing + ")";
  } else if (me_culprit) {
    detail = first;  // what this rank would read now is the job's end, not the cause
  } else if (sig.group >= 0) {
    detail = sig.is_collective() ? who_is_behind(sig, named) : where_are_peers(sig, named);
    const std::string others = stopped_elsewhere(named);
    if (!others.empty()) detail += (detail.empty() ? "" : "; ") + others;
    if (!first.empty()) detail = first + "; " + detail;
  }
  const auto [culprit, stopped] = culprit_of(named);
  mark_ending_job(culprit, stopped);
  if (!detail.empty()) os << "; " << detail;
  os << ". Ending the job (MPI_Abort). MGPU_DIST_DEBUG=1 compares the ranks' collectives; "
     << "MGPU_DIST_TIMEOUT_S sets the limit.";
  return os.str();
}

std::string find_crossing(const OpSignature& sig) {
  const int me = rank();
  const RankProgress mine = read_progress(me);
  if (!mine.on(sig.group)) return "";
  for (int r : group_members(sig.group)) {
    if (r == me) continue;
    const RankProgress p = read_progress(r);
    const GroupProgress* g = p.on(sig.group);
    if (!g || g->issued >= sig.seq) continue;
    for (int h = 0; h < kTrackedGroups; ++h) {
      const GroupProgress& theirs = p.groups[h];
      const std::int64_t seen = mine.groups[h].issued;
      if (h == sig.group || theirs.issued <= seen) continue;
      const std::vector<int> shared = group_members(h);
      if (!contains(shared, me) || !contains(shared, r)) continue;
      // r issued #seen+1 on h before sig's op; this rank issued sig's op and not #seen+1.
      std::ostringstream os;
      os << kCrossGroupText << "rank " << me << " issued " << sig.describe() << " on "
         << group_label(sig.group) << ", which rank " << r << " has not issued; rank " << r
         << " issued ";
      if (theirs.issued == seen + 1) {
        os << describe_theirs(theirs.latest);
      } else {
        os << "#" << seen + 1 << " to #" << theirs.issued << " (the last "
           << describe_theirs(theirs.latest) << ")";
      }
      os << " on " << group_label(h) << " first, which rank " << me << " has not. "
         << kCrossGroupRule << ". Ending the job (MPI_Abort).";
      return os.str();
    }
  }
  return "";
}

}  // namespace mgpu::dist::detail
