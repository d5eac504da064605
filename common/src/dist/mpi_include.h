// Private: <mpi.h> without the deprecated MPI C++ bindings (they do not compile cleanly at
// -Wextra, and mgpu uses the C API only).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
