// The index of a sharded checkpoint as JSON text, and back (strictly: every field checked).
#pragma once

#include <string>

#include "mgpu/io/sharded_checkpoint.h"

namespace mgpu::io::sharded {

/// The index's text (format, version, world size, metadata, tensors with their chunks).
std::string index_to_json(const ShardedIndex& index);
/// Parses an index's text; throws mgpu::Error naming `source` and the field that is wrong.
/// Does not check the cover (check_exact_cover does).
ShardedIndex index_from_json(const std::string& text, const std::string& source);

}  // namespace mgpu::io::sharded
