/// @file safetensors_json.h
/// @brief The JSON of a safetensors header, parsed strictly (nlohmann::json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mgpu::io {

/// Parses a header's text (without the 8-byte length; UTF-8 already checked) into a JSON
/// object. Refuses (SafetensorsError, `file` in the message) with rule invalid_json what is
/// not one JSON object (a raw NUL byte included: nlohmann's parser would stop there and
/// accept the rest), and with rule duplicate_name a key that appears twice in any object
/// (nlohmann alone would silently keep the last one).
nlohmann::json parse_header_json(std::string_view text, const std::string& file);

}  // namespace mgpu::io
