// Private: what a rank says when a collective hangs, from the progress board: which ranks
// have not reached it and where they are, and (debug mode) an order that differs across
// groups.
#pragma once

#include <string>

#include "engine.h"

namespace mgpu::dist::detail {

/// The watchdog's message: `sig` did not complete within `timeout_s` on this rank. Publishes
/// that this rank ends the job, with the rank it names as stopped or gone (progress_board.h).
std::string timeout_message(const OpSignature& sig, double timeout_s);

/// Debug mode, while this rank waits for the other members at collective `sig`: a member
/// that has not issued it but issued first a collective on another group the two share,
/// which this rank has not issued yet (both orders cannot hold). The message naming both
/// ops, or "" when the board shows no such pair.
std::string find_crossing(const OpSignature& sig);

/// The common start of the debug mode's cross-group messages.
constexpr const char* kCrossGroupText =
    "mgpu::dist debug check: the ranks issued collectives on different groups in different "
    "orders: ";
/// Their common end: the rule.
constexpr const char* kCrossGroupRule =
    "Every rank must issue its collectives, over all groups, in one order (NCCL hangs "
    "otherwise)";

}  // namespace mgpu::dist::detail
