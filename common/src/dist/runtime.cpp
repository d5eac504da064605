// MPI start-up and shutdown, the rank's place on its node, and rank-aware printing.
#include "mgpu/dist/runtime.h"

#include "mpi_include.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "group_base.h"
#include "mgpu/dist/log.h"
#include "mpi_util.h"
#include "progress_board.h"

namespace mgpu::dist {
namespace {

struct RuntimeState {
  bool initialized = false;
  bool we_started_mpi = false;
  int rank = 0, size = 1, local_rank = 0, local_size = 1, nodes = 1;
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Comm exit_comm = MPI_COMM_NULL;  // failing_alike_everywhere()'s own communicator
  std::mutex groups_mutex;
  std::vector<std::weak_ptr<detail::BackendGroup>> groups;
};

RuntimeState& state() {
  static RuntimeState s;
  return s;
}

// Open MPI's MPI_Finalize ends in PMIx_Finalize, which tells mpirun "this rank exits
// normally" and waits for mpirun's answer, but for 2 s at most. When mpirun answers later
// (a loaded machine), the rank exits first, and mpirun may handle the exit before the
// message: it then reports the rank as "exiting improperly" and fails a job whose ranks all
// passed. So a rank whose MPI_Finalize took that long waits before it exits, leaving mpirun
// time to read the message first. A quicker MPI_Finalize was answered: it waits for nothing.
void finalize_mpi() {
  using namespace std::chrono_literals;
  constexpr auto kPmixAnswerWait = 2s, kExitDelay = 3s;
  const auto start = std::chrono::steady_clock::now();
  MPI_Finalize();
  if (std::chrono::steady_clock::now() - start >= kPmixAnswerWait - 100ms)
    std::this_thread::sleep_for(kExitDelay);
}

// tools/mpirun names a rank that a signal kills by its host and pid, which Open MPI 4.1 does
// not report (its message says "PID 0"): each rank leaves them in the folder it is given.
void note_pid_for_launcher(int rank) {
  const char* dir = std::getenv("MGPU_LAUNCH_DIR");
  if (!dir || !*dir) return;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  std::ofstream(std::string(dir) + "/rank-" + std::to_string(rank)) << getpid() << " " << host << "\n";
}

}  // namespace

namespace detail {

void register_group(const std::shared_ptr<BackendGroup>& group) {
  std::lock_guard<std::mutex> lock(state().groups_mutex);
  state().groups.push_back(group);
}

MPI_Comm node_comm() { return state().node_comm; }

void require_initialized(const char* what) {
  MGPU_CHECK(state().initialized, what,
             ": the distributed runtime is not running; call mgpu::dist::init() first "
             "(or create a mgpu::dist::Runtime at the top of main)");
}

void write_line(std::FILE* out, const std::string& line) {
  std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

}  // namespace detail

void init(int* argc, char*** argv) {
  RuntimeState& s = state();
  if (s.initialized) return;
  int already = 0;
  MPI_Initialized(&already);
  int provided = 0;
  if (!already) {
    // Without mpirun, Open MPI starts as a "singleton": rank 0 of a world of 1.
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MGPU_CHECK(rc == MPI_SUCCESS, "mgpu::dist::init: MPI_Init_thread failed: ",
               detail::mpi_error_string(rc));
    s.we_started_mpi = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // Errors come back as codes, which MGPU_MPI_CHECK turns into mgpu::Error.
  MGPU_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MGPU_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &s.rank));
  MGPU_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s.size));
  note_pid_for_launcher(s.rank);
  // Ranks that can share memory are on the same node: that is how the local rank is found.
  MGPU_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank,
                                     MPI_INFO_NULL, &s.node_comm));
  MGPU_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &s.exit_comm));
  MGPU_MPI_CHECK(MPI_Comm_rank(s.node_comm, &s.local_rank));
  MGPU_MPI_CHECK(MPI_Comm_size(s.node_comm, &s.local_size));
  int leader = s.local_rank == 0 ? 1 : 0;
  MGPU_MPI_CHECK(MPI_Allreduce(&leader, &s.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  detail::create_user_ops();
  detail::start_progress_board(s.node_comm);
  s.initialized = true;
  if (provided < MPI_THREAD_MULTIPLE && s.rank == 0)
    detail::write_line(stderr,
                       "mgpu::dist: warning: this MPI does not provide MPI_THREAD_MULTIPLE; "
                       "keep to one ProcessGroup at a time");
}

void finalize() {
  RuntimeState& s = state();
  if (!s.initialized) return;
  detail::mark_finalizing();  // a rank that waits for this one can now say where it is
  std::vector<std::shared_ptr<detail::BackendGroup>> live;
  {
    std::lock_guard<std::mutex> lock(s.groups_mutex);
    for (auto& w : s.groups)
      if (auto g = w.lock()) live.push_back(g);
    s.groups.clear();
  }
  for (auto& g : live) g->shutdown();
  detail::reset_default_group();
  detail::free_user_ops();
  detail::stop_progress_board();
  MPI_Comm_free(&s.node_comm);
  MPI_Comm_free(&s.exit_comm);
  s.initialized = false;
  int done = 0;
  MPI_Finalized(&done);
  if (s.we_started_mpi && !done) finalize_mpi();
}

bool is_initialized() { return state().initialized; }
int rank() { return state().rank; }
int world_size() { return state().size; }
int local_rank() { return state().local_rank; }
int local_world_size() { return state().local_size; }
int num_nodes() { return state().nodes; }

Device rank_device(Device::Kind kind) {
  return kind == Device::Kind::cuda ? Device::cuda(local_rank()) : Device::cpu(0);
}

Device rank_device(const std::string& flag) {
  if (flag == "cpu") return rank_device(Device::Kind::cpu);
  if (flag == "cuda" || flag == "gpu") return rank_device(Device::Kind::cuda);
  return Device::parse(flag);  // an explicit "cuda:3" or "cpu:0"; throws on anything else
}

bool failing_alike_everywhere(const std::string& reason, double wait_s) {
  RuntimeState& s = state();
  if (!s.initialized) return false;
  if (s.size == 1) return true;
  MPI_Request arrived = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(s.exit_comm, &arrived) != MPI_SUCCESS) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  int done = 0;
  while (!done) {
    if (MPI_Test(&arrived, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) return false;  // someone failed alone
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Every rank is here: the same reason everywhere? (its hash's smallest and largest)
  const unsigned long long h = std::hash<std::string>{}(reason);
  unsigned long long lo = 0, hi = 0;
  if (MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, s.exit_comm) != MPI_SUCCESS ||
      MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, s.exit_comm) != MPI_SUCCESS)
    return false;
  return lo == hi;
}

void abort_job(const std::string& reason, int exit_code) {
  detail::write_line(stderr, rank_prefix() + reason);
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

std::string rank_prefix() { return "[rank " + std::to_string(rank()) + "] "; }

}  // namespace mgpu::dist
