// Choosing a backend and creating groups.
#include "mgpu/dist/process_group.h"

#include "mpi_include.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <set>
#include <vector>

#include "gpu_identity.h"
#include "group_base.h"
#include "mgpu/dist/log.h"
#include "mgpu/dist/runtime.h"
#include "mpi_util.h"
#include "process_group_mpi.h"
#include "progress_board.h"
#include "process_group_nccl.h"

namespace mgpu::dist {
namespace {

std::shared_ptr<ProcessGroup> default_group_ptr;

// How the ranks of this node map onto GPUs: ranks on the node, distinct GPUs they use, and
// whether this rank's GPU is used by no other rank of the node.
struct NodeGpus {
  int ranks = 1;
  int distinct = 0;
  bool mine_unique = false;
};

NodeGpus node_gpus(const Device& device) {
  constexpr int kLen = 64;
  char mine[kLen] = {0};
  std::string id = detail::gpu_bus_id(device);
  std::strncpy(mine, id.c_str(), kLen - 1);
  MPI_Comm node = detail::node_comm();
  NodeGpus g;
  MGPU_MPI_CHECK(MPI_Comm_size(node, &g.ranks));
  std::vector<char> all(static_cast<std::size_t>(kLen) * g.ranks);
  MGPU_MPI_CHECK(MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, node));
  std::multiset<std::string> ids;
  for (int r = 0; r < g.ranks; ++r) {
    std::string s(all.data() + static_cast<std::size_t>(r) * kLen);
    if (!s.empty()) ids.insert(s);
  }
  g.distinct = static_cast<int>(std::set<std::string>(ids.begin(), ids.end()).size());
  g.mine_unique = !id.empty() && ids.count(id) == 1;
  return g;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + "]";
}

// `ranks` sorted, after checking that they name distinct ranks of the world.
std::vector<int> checked_members(const std::vector<int>& ranks) {
  MGPU_CHECK(!ranks.empty(), "new_group: the list of ranks is empty; a group needs at least ",
             "one member");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    MGPU_CHECK(sorted[i] >= 0 && sorted[i] < world_size(), "new_group: rank ", sorted[i],
               " in ", rank_list(ranks), " is not a rank of this world of ", world_size(),
               " (ranks are 0..", world_size() - 1, ")");
    MGPU_CHECK(i == 0 || sorted[i] != sorted[i - 1], "new_group: rank ", sorted[i],
               " is listed twice in ", rank_list(ranks), "; list each member once");
  }
  return sorted;
}

}  // namespace

bool built_with_nccl() { return detail::built_with_nccl(); }

BackendChoice choose_backend(const std::string& requested, const Device& device) {
  detail::require_initialized("choose_backend");
  MGPU_CHECK(requested == "auto" || requested == "mpi" || requested == "nccl",
             "backend '", requested, "' is not one of auto, mpi, nccl");
  if (requested == "mpi") return {"mpi", "asked for with --backend mpi"};
  if (device.is_cpu()) {
    MGPU_CHECK(requested != "nccl", "nccl backend: NCCL moves GPU memory only, but the tensors ",
               "are on ", device.str(), ". Use --backend mpi (or auto) for CPU tensors, or run ",
               "with --device cuda");
    return {"mpi", "the tensors are on the CPU, and NCCL moves GPU memory only"};
  }
  // Every rank must reach the same decision, so the per-node facts are combined over the
  // world: nccl only if on every node every rank has a GPU of its own.
  NodeGpus g = node_gpus(device);
  int ok = g.mine_unique ? 1 : 0, all_ok = 0;
  MGPU_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  std::string sharing = ::mgpu::detail::concat(g.ranks, " rank(s) on this node share ", g.distinct,
                                       " GPU(s)");
  if (requested == "nccl") {
    MGPU_CHECK(detail::built_with_nccl(), "nccl backend: this build of mgpu has no NCCL ",
               "(rebuild with -Dcuda=enabled where NCCL is installed), so use --backend mpi");
    MGPU_CHECK(all_ok || g.distinct > 0, "nccl backend refused: no GPU is visible on this ",
               "node, and NCCL needs a GPU of its own for every rank. Fix: run with --backend "
               "mpi and --device cpu");
    MGPU_CHECK(all_ok, "nccl backend refused: ", sharing, ", but NCCL needs a GPU of its own ",
               "for every rank (it would stop with 'Duplicate GPU detected'). Fix: run with ",
               "--backend mpi, or start at most ", g.distinct, " rank(s) per node (e.g. mpirun ",
               "-np ", g.distinct, ")");
    return {"nccl", "asked for with --backend nccl; " + sharing};
  }
  if (!detail::built_with_nccl()) return {"mpi", "this build has no NCCL"};
  if (!all_ok)
    return {"mpi", g.distinct == 0 ? std::string("no GPU is visible")
                                   : sharing + " (or some node does), and NCCL needs a GPU of its own per rank"};
  return {"nccl", "every rank has a GPU of its own (" + sharing + ")"};
}

std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const Device& device,
                                        const GroupOptions& options) {
  detail::require_initialized("new_group");
  std::vector<int> everyone(static_cast<std::size_t>(world_size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  return new_group(everyone, backend, device, options);
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& backend,
                                        const Device& device, const GroupOptions& options) {
  detail::require_initialized("new_group");
  const std::vector<int> members = checked_members(ranks);
  BackendChoice choice = choose_backend(backend, device);
  const bool whole_world = static_cast<int>(members.size()) == world_size();
  if (options.announce)
    log0("mgpu::dist: backend ", choice.backend, " (", choice.reason, "); ",
         whole_world ? "world size " + std::to_string(world_size())
                     : "group of ranks " + rank_list(members),
         " on ", num_nodes(), " node(s)");
  // Every rank takes part in the split (MPI_Comm_split is collective over the world); the
  // members get a communicator of their own, in the order of their world ranks.
  const int id = detail::register_group_members(members);  // on every rank, member or not
  const auto mine = std::find(members.begin(), members.end(), rank());
  const bool member = mine != members.end();
  MPI_Comm comm = MPI_COMM_NULL;
  MGPU_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED,
                                static_cast<int>(mine - members.begin()), &comm));
  if (!member) return nullptr;
  MGPU_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  std::shared_ptr<detail::BackendGroup> g;
  if (choice.backend == "nccl") {
    g = detail::make_nccl_group(device, options, comm, id);
  } else {
    g = std::make_shared<detail::MpiGroup>(device, options, comm, id);
  }
  detail::register_group(g);
  return g;
}

ProcessGroup& init_process_group(const std::string& backend, const Device& device,
                                 const GroupOptions& options) {
  MGPU_CHECK(!default_group_ptr, "init_process_group: the default group exists already");
  default_group_ptr = new_group(backend, device, options);
  return *default_group_ptr;
}

ProcessGroup& default_group() {
  MGPU_CHECK(default_group_ptr, "default_group: call mgpu::dist::init_process_group() first");
  return *default_group_ptr;
}

namespace detail {
void reset_default_group() { default_group_ptr.reset(); }
}  // namespace detail

}  // namespace mgpu::dist
