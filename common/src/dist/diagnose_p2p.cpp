// The hang message of a send, a receive or a batch of them (see diagnose_p2p.h).
#include "diagnose_p2p.h"

#include <algorithm>
#include <cstddef>

#include "diagnose_rank.h"
#include "mgpu/dist/runtime.h"
#include "progress_board.h"

namespace mgpu::dist::detail {
namespace {

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

}  // namespace

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

}  // namespace mgpu::dist::detail
