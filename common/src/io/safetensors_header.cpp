// The safetensors header: dtype names, rules and refusals, UTF-8, and the header's strict
// JSON. The writer and the header's validating reader are lesson 07's (safetensors.h).
// Depends on nothing of the tensor library but DType, so the fuzz harness (tests/fuzz)
// compiles it on its own, with the reader's reference.
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "mgpu/io/safetensors.h"
#include "mgpu/io/safetensors_json.h"

namespace mgpu::io {

// ---- rules and refusals --------------------------------------------------------------------

const char* rule_name(SafetensorsRule rule) {
  switch (rule) {
    case SafetensorsRule::too_small: return "too_small";
    case SafetensorsRule::header_too_large: return "header_too_large";
    case SafetensorsRule::header_past_end: return "header_past_end";
    case SafetensorsRule::invalid_utf8: return "invalid_utf8";
    case SafetensorsRule::invalid_json: return "invalid_json";
    case SafetensorsRule::invalid_entry: return "invalid_entry";
    case SafetensorsRule::unknown_dtype: return "unknown_dtype";
    case SafetensorsRule::duplicate_name: return "duplicate_name";
    case SafetensorsRule::offsets_reversed: return "offsets_reversed";
    case SafetensorsRule::overlap: return "overlap";
    case SafetensorsRule::hole: return "hole";
    case SafetensorsRule::past_end: return "past_end";
    case SafetensorsRule::byte_length: return "byte_length";
    case SafetensorsRule::overflow: return "overflow";
    case SafetensorsRule::trailing_data: return "trailing_data";
  }
  return "?";
}

const char* rule_text(SafetensorsRule rule) {
  switch (rule) {
    case SafetensorsRule::too_small: return "a file starts with an 8-byte header length";
    case SafetensorsRule::header_too_large: return "a header is at most 100000000 bytes";
    case SafetensorsRule::header_past_end: return "the header must fit in the file";
    case SafetensorsRule::invalid_utf8: return "the header must be UTF-8";
    case SafetensorsRule::invalid_json: return "the header must be one JSON object";
    case SafetensorsRule::invalid_entry:
      return "a tensor is {\"dtype\": string, \"shape\": [n, ...], \"data_offsets\": [begin, end]} "
             "and __metadata__ maps strings to strings";
    case SafetensorsRule::unknown_dtype: return "dtype must be one of F64 F32 F16 BF16 I64 I32";
    case SafetensorsRule::duplicate_name: return "names must be unique";
    case SafetensorsRule::offsets_reversed:
    case SafetensorsRule::overlap:
    case SafetensorsRule::hole:
      return "data_offsets must tile the data from byte 0, without holes or overlaps";
    case SafetensorsRule::past_end: return "a tensor's data must lie inside the file";
    case SafetensorsRule::byte_length: return "a tensor's byte length must be numel x dtype size";
    case SafetensorsRule::overflow: return "sizes must fit in 64 bits";
    case SafetensorsRule::trailing_data: return "the data must end at the end of the file";
  }
  return "?";
}

namespace {
std::string refusal_message(const std::string& file, const std::string& tensor,
                            SafetensorsRule rule, const std::string& detail) {
  std::ostringstream os;
  os << file << ": " << (tensor.empty() ? std::string("header") : "tensor '" + tensor + "'")
     << ": " << detail << " (rule " << rule_name(rule) << ": " << rule_text(rule) << ")";
  return os.str();
}
}  // namespace

SafetensorsError::SafetensorsError(std::string file, std::string tensor, SafetensorsRule rule,
                                   const std::string& detail)
    : Error(refusal_message(file, tensor, rule, detail)),
      file_(std::move(file)), tensor_(std::move(tensor)), rule_(rule) {}

void refuse(const std::string& file, const std::string& tensor, SafetensorsRule rule,
            const std::string& detail) {
  throw SafetensorsError(file, tensor, rule, detail);
}

// ---- dtypes ----------------------------------------------------------------------------------

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {  // no default: a new DType must be given its name here (-Wswitch)
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
  }
  MGPU_FAIL("safetensors: dtype ", dtype_name(dtype), " has no safetensors name");
}

bool dtype_from_safetensors(const std::string& name, DType& dtype) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32})
    if (name == safetensors_dtype_name(t)) {
      dtype = t;
      return true;
    }
  return false;
}

int safetensors_dtype_rank(DType dtype) {
  // Positions in the format's dtype list: BOOL 0, F4 1, F6_E2M3 2, F6_E3M2 3, U8 4, I8 5,
  // F8_E5M2 6, F8_E4M3 7, F8_E8M0 8, I16 9, U16 10, F16 11, BF16 12, I32 13, U32 14,
  // F32 15, C64 16, F64 17, I64 18, U64 19.
  switch (dtype) {
    case DType::f16: return 11;
    case DType::bf16: return 12;
    case DType::i32: return 13;
    case DType::f32: return 15;
    case DType::f64: return 17;
    case DType::i64: return 18;
  }
  MGPU_FAIL("safetensors: dtype ", dtype_name(dtype), " has no safetensors rank");
}

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    int len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;  // a continuation byte or 0xF8..0xFF cannot start a character
    if (n - i < static_cast<std::size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // The shortest form only, no UTF-16 surrogates, nothing past U+10FFFF.
    static const std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += static_cast<std::size_t>(len);
  }
  return true;
}

// ---- the header's JSON -----------------------------------------------------------------------

namespace {
using Json = nlohmann::json;
}  // namespace

Json parse_header_json(std::string_view text, const std::string& file) {
  // No JSON text holds a raw NUL byte, and nlohmann's parser would stop at one and accept
  // whatever follows (a header padded with NULs instead of spaces, say).
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
    refuse(file, "", SafetensorsRule::invalid_json,
           "a NUL byte at header byte " + std::to_string(nul));
  std::vector<std::set<std::string>> seen;  // the keys of every open object
  std::string entry;                        // the top-level key being parsed
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) seen.emplace_back();
    if (event == Json::parse_event_t::object_end && !seen.empty()) seen.pop_back();
    if (event == Json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (depth == 1) entry = key;
      if (!seen.empty() && !seen.back().insert(key).second) {
        if (depth == 1) refuse(file, key, SafetensorsRule::duplicate_name, "the name appears twice");
        refuse(file, entry, SafetensorsRule::duplicate_name, "key '" + key + "' appears twice");
      }
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::exception& e) {
    refuse(file, "", SafetensorsRule::invalid_json, e.what());
  }
  if (!json.is_object())
    refuse(file, "", SafetensorsRule::invalid_json,
           "the header is " + std::string(json.type_name()) + ", not an object");
  return json;
}

}  // namespace mgpu::io
