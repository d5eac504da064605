// Private: how the hang messages (diagnose.cpp, diagnose_p2p.cpp) describe another rank
// from what the progress board shows of it.
#pragma once

#include <string>

#include "engine.h"
#include "progress_board.h"

namespace mgpu::dist::detail {

/// Another rank's op as it describes it, less the backend (which is not on the board).
std::string describe_theirs(OpSignature s);

/// Where rank `p` is on `group`: "its last: broadcast #16 f32[4] root=0, completed; it is in
/// dist::finalize()"; with `p2p`, also the send or receive it waits in.
std::string whereabouts(const RankProgress& p, int group, bool p2p = true);

/// A point-to-point peer's latest collective, on any group: "its latest collective:
/// broadcast #8 f64[1] root=1 on group 2 (ranks 1, 3), completed".
std::string latest_collective(const RankProgress& p);

/// Whether rank `r`'s process is stopped or gone, read from /proc (Linux; ranks of this
/// node): "rank 2 (process 4711) is stopped (...)", or "" when it runs or is not known.
std::string process_state(int r, const RankProgress& p);

}  // namespace mgpu::dist::detail
