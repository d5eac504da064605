// An LD_PRELOAD shim for a regression test of the shutdown: it makes mpirun answer late at
// the very end of MPI_Finalize, as it can on a loaded machine.
//
// Inside MPI_Finalize, Open MPI calls PMIx_Finalize, which tells mpirun "this rank exits
// normally" and waits for mpirun's acknowledgement, but at most 2 s. When mpirun answers
// later than that, the rank exits first, and mpirun may see the exit before the message:
// it then reports the rank as "exiting improperly" and the job fails although every rank
// passed. In rank 0, the shim stops mpirun (SIGSTOP, from a helper process) when
// MPI_Finalize calls PMIx_Finalize and lets it go again MGPU_TEST_LAUNCHER_STALL_S seconds
// later (default 3); every rank's answer is late then.
// (Open MPI 4.1 also calls PMIx_Finalize inside MPI_Init, where nothing is stalled.)
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>

extern "C" int PMIx_Finalize(const void* info, std::size_t ninfo) {
  using Real = int (*)(const void*, std::size_t);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "PMIx_Finalize"));
  using Finalized = int (*)(int*);
  static const auto finalized = reinterpret_cast<Finalized>(dlsym(RTLD_DEFAULT, "MPI_Finalized"));
  static bool stalled = false;
  int in_finalize = 0;  // true from the start of MPI_Finalize on
  if (finalized) finalized(&in_finalize);
  const char* seconds = std::getenv("MGPU_TEST_LAUNCHER_STALL_S");
  const unsigned stall_s = seconds ? static_cast<unsigned>(std::atoi(seconds)) : 3u;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");  // set by Open MPI's mpirun
  const bool rank0 = rank && std::atoi(rank) == 0;
  if (rank0 && in_finalize && !stalled && stall_s > 0) {
    stalled = true;
    const pid_t launcher = getppid();
    // A helper process, not a thread: it must outlive this rank to wake mpirun up again.
    // It closes what it inherited (the rank's output, its PMIx socket), so that mpirun
    // sees them close when the rank exits.
    if (fork() == 0) {
      closefrom(0);
      kill(launcher, SIGSTOP);
      sleep(stall_s);
      kill(launcher, SIGCONT);
      _exit(0);
    }
  }
  return real ? real(info, ninfo) : -1;
}
