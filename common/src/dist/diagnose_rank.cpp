// How the hang messages describe another rank (see diagnose_rank.h).
#include "diagnose_rank.h"

#include <fstream>

namespace mgpu::dist::detail {

// Another rank's op: its backend is not on the board.
std::string describe_theirs(OpSignature s) {
  s.backend.clear();
  return s.describe();
}

// "its last: broadcast #16 f32[4] root=0, completed; it is in dist::finalize()".
// With `p2p`, also the send or receive it waits in.
std::string whereabouts(const RankProgress& p, int group, bool p2p) {
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

}  // namespace mgpu::dist::detail
