// The safetensors header: dtype names, rules and refusals, and the header's writer and
// validating parser. Depends on nothing of the tensor library but DType, so the fuzz
// harness (tests/fuzz) compiles it on its own.
#include <algorithm>
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

// ---- the writer's header ---------------------------------------------------------------------

std::string encode_safetensors_header(const std::vector<TensorEntry>& tensors,
                                      const Metadata& metadata) {
  // ordered_json keeps insertion order: __metadata__ first, then the tensors in data
  // order, each with its fields in the order dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) {
      MGPU_CHECK(is_valid_utf8(key) && is_valid_utf8(value),
                 "safetensors: __metadata__ entry '", key, "' is not valid UTF-8");
      meta[key] = value;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t expected_begin = 0;
  for (const TensorEntry& t : tensors) {
    MGPU_CHECK(is_valid_utf8(t.name), "safetensors: tensor name is not valid UTF-8");
    MGPU_CHECK(t.name != "__metadata__",
               "safetensors: a tensor cannot be named '__metadata__' (the format reserves it)");
    MGPU_CHECK(!header.contains(t.name), "safetensors: two tensors are named '", t.name, "'");
    MGPU_CHECK(t.begin == expected_begin && t.end >= t.begin, "safetensors: tensor '", t.name,
               "' has data_offsets [", t.begin, ", ", t.end, ") but its data starts at ",
               expected_begin);
    expected_begin = t.end;
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype);
    entry["shape"] = nlohmann::ordered_json::array();
    for (std::int64_t d : t.shape) entry["shape"].push_back(static_cast<std::uint64_t>(d));
    entry["data_offsets"] = {t.begin, t.end};
    header[t.name] = std::move(entry);
  }
  std::string text = header.dump();  // compact: no spaces, UTF-8 kept as is
  // Spaces up to a multiple of 8, so the data (and every 8-byte element) starts aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  MGPU_CHECK(text.size() <= kMaxHeaderBytes, "safetensors: the header would be ", text.size(),
             " bytes; readers refuse more than ", kMaxHeaderBytes,
             " (save fewer tensors per file)");
  return text;
}

// ---- the reader's header ---------------------------------------------------------------------

namespace {

using Json = nlohmann::json;

// A JSON number that is a non-negative integer (nlohmann keeps those as unsigned).
bool as_u64(const Json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<std::uint64_t>();
  return true;
}

TensorEntry parse_entry(const std::string& name, const Json& j, const std::string& file) {
  const auto bad = [&](const std::string& what) {
    refuse(file, name, SafetensorsRule::invalid_entry, what);
  };
  if (!j.is_object()) bad("the entry is " + std::string(j.type_name()) + ", not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field)) bad(std::string("field \"") + field + "\" is missing");
  TensorEntry t;
  t.name = name;
  const Json& dtype = j["dtype"];
  if (!dtype.is_string()) bad("\"dtype\" is " + std::string(dtype.type_name()) + ", not a string");
  if (!dtype_from_safetensors(dtype.get<std::string>(), t.dtype))
    refuse(file, name, SafetensorsRule::unknown_dtype,
           "dtype \"" + dtype.get<std::string>() + "\" is not one this library reads");
  const Json& shape = j["shape"];
  if (!shape.is_array()) bad("\"shape\" is " + std::string(shape.type_name()) + ", not an array");
  for (const Json& d : shape) {
    std::uint64_t v;
    if (!as_u64(d, v)) bad("\"shape\" holds " + d.dump() + ", not a non-negative integer");
    if (v > static_cast<std::uint64_t>(INT64_MAX))
      refuse(file, name, SafetensorsRule::overflow, "dimension " + d.dump() + " is too large");
    t.shape.push_back(static_cast<std::int64_t>(v));
  }
  const Json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], t.begin) ||
      !as_u64(offsets[1], t.end))
    bad("\"data_offsets\" is " + offsets.dump() + ", not [begin, end] with two integers >= 0");
  return t;
}

std::string range_str(const TensorEntry& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
}

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

SafetensorsHeader parse_safetensors_header(std::string_view head, std::uint64_t file_size,
                                           const std::string& file) {
  // Step 1) the 8-byte length, and the header inside the file.
  if (file_size < 8 || head.size() < 8)
    refuse(file, "", SafetensorsRule::too_small,
           "the file has " + std::to_string(file_size) + " bytes");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
  if (n > kMaxHeaderBytes)
    refuse(file, "", SafetensorsRule::header_too_large,
           "the header length is " + std::to_string(n) + " bytes");
  if (8 + n > file_size)
    refuse(file, "", SafetensorsRule::header_past_end,
           "a header of " + std::to_string(n) + " bytes does not fit in a file of " +
               std::to_string(file_size) + " bytes");
  MGPU_CHECK(head.size() >= 8 + n, "parse_safetensors_header: ", file, ": ", head.size(),
             " bytes given, the header needs ", 8 + n);
  const std::string_view text = head.substr(8, static_cast<std::size_t>(n));

  // Step 2) UTF-8, JSON, one object, no name twice.
  if (!is_valid_utf8(text)) refuse(file, "", SafetensorsRule::invalid_utf8, "ill-formed UTF-8");
  const Json json = parse_header_json(text, file);

  // Step 3) every entry: metadata strings, or a tensor's dtype, shape and offsets.
  SafetensorsHeader h;
  h.header_bytes = n;
  for (const auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      if (value.is_null()) continue;  // the reference implementation accepts null
      if (!value.is_object())
        refuse(file, name, SafetensorsRule::invalid_entry, "__metadata__ is not an object");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string())
          refuse(file, name, SafetensorsRule::invalid_entry,
                 "__metadata__ value of '" + key + "' is " + v.dump() + ", not a string");
        h.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(name, value, file));
  }

  // Step 4) the data: sorted by offsets, the tensors must tile [0, data size) exactly.
  const std::uint64_t data_size = file_size - 8 - n;
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  std::uint64_t cursor = 0;  // where the next tensor's data must begin
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : h.tensors) {
    if (t.end < t.begin)
      refuse(file, t.name, SafetensorsRule::offsets_reversed,
             "data_offsets " + range_str(t) + " end before they begin");
    if (t.begin < cursor)
      refuse(file, t.name, SafetensorsRule::overlap,
             "data_offsets " + range_str(t) + " overlap tensor '" + previous->name + "' at " +
                 range_str(*previous));
    if (t.begin > cursor)
      refuse(file, t.name, SafetensorsRule::hole,
             "data_offsets " + range_str(t) + " leave bytes [" + std::to_string(cursor) + ", " +
                 std::to_string(t.begin) + ") to no tensor");
    if (t.end > data_size)
      refuse(file, t.name, SafetensorsRule::past_end,
             "data_offsets " + range_str(t) + " run past the end of the data (" +
                 std::to_string(data_size) + " bytes)");
    std::uint64_t bytes = dtype_size(t.dtype);
    for (std::int64_t d : t.shape) {
      const auto du = static_cast<std::uint64_t>(d);
      if (du != 0 && bytes > UINT64_MAX / du)
        refuse(file, t.name, SafetensorsRule::overflow, "numel x dtype size overflows 64 bits");
      bytes *= du;
    }
    if (t.end - t.begin != bytes) {
      std::ostringstream shape;
      shape << "[";
      for (std::size_t i = 0; i < t.shape.size(); ++i) shape << (i ? ", " : "") << t.shape[i];
      shape << "]";
      refuse(file, t.name, SafetensorsRule::byte_length,
             "data_offsets " + range_str(t) + " hold " + std::to_string(t.end - t.begin) +
                 " bytes but " + safetensors_dtype_name(t.dtype) + shape.str() + " needs " +
                 std::to_string(bytes));
    }
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_size)
    refuse(file, "", SafetensorsRule::trailing_data,
           std::to_string(data_size - cursor) + " bytes follow the last tensor's data");
  return h;
}

}  // namespace mgpu::io
