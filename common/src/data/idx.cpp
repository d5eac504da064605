// IDX reader on zlib's gz* functions, which read gzip and plain files alike.
#include "mgpu/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <memory>

#include "mgpu/error.h"

namespace mgpu::data {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

/// Reads exactly n bytes or returns how many it got; throws on a decompression error.
std::size_t read_bytes(gzFile f, const std::string& path, void* out, std::size_t n) {
  std::size_t got = 0;
  auto* p = static_cast<unsigned char*>(out);
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      MGPU_FAIL("read_idx: ", path, ": cannot decompress (", msg ? msg : "zlib error",
                "); the file is damaged — download or reinstall it");
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  MGPU_CHECK(file != nullptr, "read_idx: cannot open ", path,
             " (no such file, or not readable)");
  unsigned char magic[4];
  MGPU_CHECK(read_bytes(file.get(), path, magic, 4) == 4, "read_idx: ", path,
             " is shorter than an IDX header (4 bytes)");
  MGPU_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: ", path,
             " is not an IDX file (its first two bytes are not zero)");
  MGPU_CHECK(magic[2] == 0x08, "read_idx: ", path, " has IDX type code 0x", std::hex,
             static_cast<int>(magic[2]), std::dec,
             "; only unsigned bytes (0x08, as in MNIST and Fashion-MNIST) are supported");
  const int ndims = magic[3];
  MGPU_CHECK(ndims >= 1 && ndims <= 4, "read_idx: ", path, " declares ", ndims,
             " dimensions (expected 1 to 4)");

  IdxArray out;
  std::int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    unsigned char be[4];
    MGPU_CHECK(read_bytes(file.get(), path, be, 4) == 4, "read_idx: ", path,
               " ends inside its header (dimension ", d, " of ", ndims, ")");
    // Sizes are big-endian: the most significant byte comes first.
    const std::int64_t size = (std::int64_t{be[0]} << 24) | (std::int64_t{be[1]} << 16) |
                              (std::int64_t{be[2]} << 8) | std::int64_t{be[3]};
    out.dims.push_back(size);
    total *= size;
    MGPU_CHECK(total <= (std::int64_t{1} << 34), "read_idx: ", path,
               " declares more than 16 GiB of data; the header is probably damaged");
  }
  out.values.resize(static_cast<std::size_t>(total));
  const std::size_t got = read_bytes(file.get(), path, out.values.data(), out.values.size());
  MGPU_CHECK(got == out.values.size(), "read_idx: ", path, " is truncated: its header promises ",
             total, " values but only ", got, " follow");
  unsigned char extra;
  MGPU_CHECK(read_bytes(file.get(), path, &extra, 1) == 0, "read_idx: ", path,
             " has bytes past the ", total, " values its header declares");
  return out;
}

}  // namespace mgpu::data
