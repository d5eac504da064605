/// @file idx.h
/// @brief Reading IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
///
/// An IDX file is a 4-byte magic number — two zero bytes, a type code (0x08 = unsigned
/// byte) and the number of dimensions — then one big-endian 32-bit size per dimension,
/// then the values in row-major order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mgpu::data {

/// The contents of an unsigned-byte IDX file.
struct IdxArray {
  std::vector<std::int64_t> dims;    ///< size of each dimension, outermost first
  std::vector<std::uint8_t> values;  ///< product(dims) bytes, row-major
};

/// Reads `path` (gzip-compressed or not: zlib detects which). Throws mgpu::Error naming the
/// file when it cannot be opened, the magic number is wrong, the type is not unsigned byte,
/// or the file is shorter or longer than its dimensions say.
IdxArray read_idx(const std::string& path);

}  // namespace mgpu::data
