// Private: what a rank says when a send, a receive or a batch of them hangs: where each
// peer is, and the tags the two sides use for each other.
#pragma once

#include <string>
#include <vector>

#include "engine.h"

namespace mgpu::dist::detail {

/// For the point-to-point op `sig` that did not complete: where each of its peers is. Adds
/// to `named` the peers whose process is stopped or gone.
std::string where_are_peers(const OpSignature& sig, std::vector<int>& named);

}  // namespace mgpu::dist::detail
