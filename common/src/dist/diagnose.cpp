// Reading the progress board when a collective hangs (see diagnose.h).
#include "diagnose.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "mgpu/dist/runtime.h"
#include "progress_board.h"

namespace mgpu::dist::detail {
namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Another rank's op: its backend is not on the board.
std::string describe_theirs(OpSignature s) {
  s.backend.clear();
  return s.describe();
}

bool same_op(const OpSignature& a, const OpSignature& b) {
  return a.kind == b.kind && a.has_tensor == b.has_tensor && a.dtype == b.dtype &&
         a.shape == b.shape && a.reduce == b.reduce && a.root == b.root;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// "its last: broadcast #16 f32[4] root=0, completed; it is in dist::finalize()".
// With `p2p`, also the send or receive it waits in.
std::string whereabouts(const RankProgress& p, int group, bool p2p = true) {
  std::string text;
  const GroupProgress* g = p.on(group);
  if (!g || g->issued == 0) {
    text = "it has issued no collective on this group";
  } else {
    text = "its last: " + describe_theirs(g->latest) +
           (g->done >= g->issued ? ", completed" : ", not completed");
  }
  if (p.finalizing) return text + "; it is in dist::finalize()";
  const GroupProgress* other = p.latest_group != group ? p.on(p.latest_group) : nullptr;
  if (other && other->done < other->issued)
    text += "; its latest: " + describe_theirs(other->latest) + " on " +
            group_label(p.latest_group) + ", not completed";
  if (p2p && p.p2p.seq > 0 && !p.p2p_done)
    text += "; it waits in " + describe_theirs(p.p2p) + " on " + group_label(p.p2p.group);
  return text;
}

// A point-to-point peer's latest collective, on any group (its last one on the op's group
// may be hundreds of ops old): "its latest collective: broadcast #8 f64[1] root=1 on group 2
// (ranks 1, 3), completed".
std::string latest_collective(const RankProgress& p) {
  const GroupProgress* g = p.on(p.latest_group);
  if (!g || g->issued == 0) return "it has issued no collective";
  return "its latest collective: " + describe_theirs(g->latest) + " on " +
         group_label(p.latest_group) + (g->done >= g->issued ? ", completed" : ", not completed");
}

// Whether rank `r`'s process is stopped or gone, read from /proc (Linux; ranks of this node):
// "rank 2 (process 4711) is stopped (...)", or "" when it runs or is not known.
std::string process_state(int r, const RankProgress& p) {
  if (p.pid <= 0) return "";
  const std::string pid = std::to_string(p.pid);
  const std::string who = "rank " + std::to_string(r) + " (process " + pid + ")";
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text;
  if (!stat || !std::getline(stat, text))
    return who + (p.ending ? " has ended the job on its own timeout" : " has exited");
  const std::size_t paren = text.rfind(')');
  const char state = paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '?';
  if (state == 'T')
    return who + " is stopped (by SIGSTOP, SIGTSTP or Ctrl-Z; `kill -CONT " + pid +
           "` resumes it)";
  if (state == 't') return who + " is stopped by a debugger (tracing stop)";
  if (state == 'Z' || state == 'X')
    return who + (p.ending ? " has ended the job on its own timeout" : " has exited");
  return "";
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

// The messages of a point-to-point op as (send?, peer, tag): a batch's, or the one of a
// send or recv.
std::vector<OpSignature::Message> messages_of(const OpSignature& s) {
  if (s.kind == OpKind::batch_p2p) return s.messages;
  OpSignature::Message m;
  m.send = s.kind == OpKind::send;
  m.peer = s.root;
  m.tag = s.tag;
  return {m};
}

std::string tag_list(const std::vector<int>& tags) {
  std::string text;
  for (int t : tags) text += (text.empty() ? "" : ", ") + std::to_string(t);
  return text;
}

// Where the peer (world rank `peer`, group rank `peer_in_group`) is, for this rank's op
// `mine` (group rank `me_in_group`): its last collective on the group, the point-to-point op
// it waits in (or its last), and the tags the two sides use for each other. The usual bug
// is a tag: a message sent with one that no receive posts, so a receive waits forever.
std::string peer_state(int peer, int peer_in_group, int me_in_group, const OpSignature& mine,
                       std::vector<int>& named) {
  RankProgress p = read_progress(peer);
  if (!p.readable) return "rank " + std::to_string(peer) + ", the peer, cannot be read from here";
  const std::string state = process_state(peer, p);
  if (!state.empty()) named.push_back(peer);
  const std::string who = "rank " + std::to_string(peer);
  std::string text = (state.empty() ? who : state) + ", the peer: " +
                     (p.finalizing || p.latest_group == mine.group || p.latest_group < 0
                          ? whereabouts(p, mine.group, false)
                          : latest_collective(p));
  if (p.p2p.seq <= 0) return text + "; it has posted no send or receive";
  text += (p.p2p_done ? "; its last send or receive: " : "; it waits in ") + describe_theirs(p.p2p) +
          " on " + group_label(p.p2p.group) + (p.p2p_done ? ", completed" : "");
  // A peer that cannot run sends nothing: its tags are not the reason.
  if (!state.empty()) return text;
  // The tags each side uses for the other on this group.
  std::vector<int> i_receive, i_send, it_receives;
  for (const auto& m : messages_of(mine))
    if (m.peer == peer_in_group) (m.send ? i_send : i_receive).push_back(m.tag);
  if (!p.p2p_done && p.p2p.group == mine.group)
    for (const auto& m : messages_of(p.p2p))
      if (m.peer == me_in_group && !m.send) it_receives.push_back(m.tag);
  // Its sends to this rank on this group, the latest as many as this rank's receives from
  // it wait for: the messages those receives should have matched.
  std::vector<OpSignature::Message> sent;
  for (const auto& [group, m] : p.sent)
    if (group == mine.group && m.peer == me_in_group) sent.push_back(m);
  if (sent.size() > i_receive.size())
    sent.erase(sent.begin(), sent.end() - static_cast<std::ptrdiff_t>(i_receive.size()));
  if (!i_receive.empty()) {
    text += "; this rank waits for tag " + tag_list(i_receive) + " from it";
    if (sent.empty()) {
      text += ", but it has sent this rank nothing of late";
    } else {
      std::string listed;
      std::vector<int> waiting = i_receive, unmatched;  // a multiset: each send matches one
      for (const auto& m : sent) {
        listed += (listed.empty() ? "" : ", ") + std::string("tag ") + std::to_string(m.tag) + " " +
                  dtype_name(m.dtype) + "[" + std::to_string(m.numel) + "]";
        auto it = std::find(waiting.begin(), waiting.end(), m.tag);
        if (it != waiting.end()) waiting.erase(it);
        else unmatched.push_back(m.tag);
      }
      text += "; its last " + std::string(sent.size() == 1 ? "send" : std::to_string(sent.size()) + " sends") +
              " to this rank: " + listed;
      if (!unmatched.empty())
        text += " (no receive here takes tag " + tag_list(unmatched) + ", while one waits for tag " +
                tag_list(waiting) + ": a tag differs)";
    }
  }
  if (!i_send.empty() && !p.p2p_done && p.p2p.group == mine.group) {
    auto has = [](const std::vector<int>& v, int t) { return std::find(v.begin(), v.end(), t) != v.end(); };
    std::vector<int> unmatched;
    for (int t : i_send)
      if (!has(it_receives, t) && !has(unmatched, t)) unmatched.push_back(t);
    if (!unmatched.empty())
      text += "; this rank sends it tag " + tag_list(unmatched) + ", which it does not receive" +
              (it_receives.empty() ? " (it posts no receive from this rank)"
                                   : " (it receives tag " + tag_list(it_receives) + ")");
  }
  return text;
}

// For a send, a receive or a batch of them: where each peer is.
std::string where_are_peers(const OpSignature& sig, std::vector<int>& named) {
  const std::vector<int> members = group_members(sig.group);
  const auto me = std::find(members.begin(), members.end(), rank());
  const int me_in_group = me == members.end() ? -1 : static_cast<int>(me - members.begin());
  std::vector<int> peers;
  for (const auto& m : messages_of(sig))
    if (m.peer >= 0 && m.peer < static_cast<int>(members.size()) &&
        std::find(peers.begin(), peers.end(), m.peer) == peers.end())
      peers.push_back(m.peer);
  std::string text;
  for (int q : peers)
    text += (text.empty() ? "" : "; ") + peer_state(members[static_cast<std::size_t>(q)], q, me_in_group, sig, named);
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
