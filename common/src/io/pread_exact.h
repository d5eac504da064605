// Reads exactly n bytes of an open file at an offset (internal to the io sources): the
// safetensors reader and the sharded checkpoint's loader both read byte ranges this way.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "mgpu/error.h"

namespace mgpu::io::detail {

// Reads n bytes of fd (the file `path`) at `offset` into dst, retrying interrupted and
// partial reads; a short read means the file changed under us and is one clear error.
inline void pread_exact(int fd, const std::string& path, char* dst, std::size_t n,
                        std::uint64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    MGPU_CHECK(r > 0, "reading ", path, " at byte ", offset, ": ",
               r < 0 ? std::strerror(errno) : "unexpected end of file (did it change?)");
    dst += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

}  // namespace mgpu::io::detail
