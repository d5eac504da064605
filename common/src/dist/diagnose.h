// Private: what a rank says when a collective hangs, from the progress board: which ranks
// have not reached it and where they are.
#pragma once

#include <string>

#include "engine.h"

namespace mgpu::dist::detail {

/// The watchdog's message: `sig` did not complete within `timeout_s` on this rank.
std::string timeout_message(const OpSignature& sig, double timeout_s);

}  // namespace mgpu::dist::detail
