// safetensors files of tensors: parse, load from disk, save atomically. The writer
// (serialize_safetensors) and the header's reader (parse_safetensors_header) are lesson 07's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mgpu/io/atomic_file.h"
#include "mgpu/io/safetensors.h"
#include "pread_exact.h"

namespace mgpu::io {

namespace {

// The format is little-endian; so is every machine this library runs on (x86-64, ARM64).
void check_little_endian() {
  const std::uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  MGPU_CHECK(first == 1, "safetensors: this machine is big-endian; the format is little-endian");
}

// A host tensor for an entry, filled by `fill(destination, byte count)`, then moved to `device`.
template <typename Fill>
Tensor make_tensor(const TensorEntry& e, const Device& device, Fill&& fill) {
  Tensor host = Tensor::empty(e.shape, e.dtype, Device::cpu());
  if (host.nbytes() > 0) fill(static_cast<char*>(host.raw_data()), host.nbytes());
  return host.to(device);
}

}  // namespace

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& file,
                                  const Device& device) {
  check_little_endian();
  const SafetensorsHeader h = parse_safetensors_header(bytes, bytes.size(), file);
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const TensorEntry& e : h.tensors) {
    // The header check guarantees [begin, end) lies inside the data.
    const std::string_view src = bytes.substr(h.data_start() + e.begin, e.end - e.begin);
    out.tensors[e.name] =
        make_tensor(e, device, [&](char* dst, std::size_t n) { std::memcpy(dst, src.data(), n); });
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path, const Device& device) {
  check_little_endian();
  const int fd = open_regular_file(path);  // no device, FIFO or folder (read_file.cpp)
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  MGPU_CHECK(::fstat(fd, &st) == 0, "cannot stat ", path, ": ", std::strerror(errno));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  auto read_at = [&](char* dst, std::size_t n, std::uint64_t offset) {
    detail::pread_exact(fd, path, dst, n, offset);
  };
  // Step 1) the length, then the header it announces (the parser checks both against the
  // file size before trusting them).
  std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(8, file_size)), '\0');
  read_at(head.data(), head.size(), 0);
  if (head.size() == 8) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
    if (n <= kMaxHeaderBytes && 8 + n <= file_size) {
      head.resize(static_cast<std::size_t>(8 + n));
      read_at(head.data() + 8, static_cast<std::size_t>(n), 8);
    }
  }
  const SafetensorsHeader h = parse_safetensors_header(head, file_size, path);
  // Step 2) each tensor straight from the file into its buffer.
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const TensorEntry& e : h.tensors)
    out.tensors[e.name] = make_tensor(e, device, [&](char* dst, std::size_t n) {
      read_at(dst, n, h.data_start() + e.begin);
    });
  return out;
}

void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata) {
  check_little_endian();
  atomic_replace(parent_directory(path), path.substr(path.find_last_of('/') + 1),
                 serialize_safetensors(tensors, metadata));
}

}  // namespace mgpu::io
