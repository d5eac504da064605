// State dicts of modules: collect, load strictly, rename; 0-d scalars.
#include "mgpu/io/state_dict.h"

#include <cstring>
#include <set>
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/io/checksum.h"
#include "starts_with.h"

namespace mgpu::io {

StateDict module_state_dict(nn::Module& model) {
  StateDict out;
  for (auto& [name, p] : model.named_parameters()) out[name] = p->value;
  for (auto& [name, b] : model.named_buffers()) out[name] = *b;
  return out;
}

namespace {

std::string join(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (std::size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
  return os.str();
}

}  // namespace

LoadReport load_module_state_dict(nn::Module& model, const StateDict& state, bool strict,
                                  const std::string& source) {
  // The model's tensors by name: parameters' values and buffers.
  std::map<std::string, Tensor*> targets;
  for (auto& [name, p] : model.named_parameters()) targets[name] = &p->value;
  for (auto& [name, b] : model.named_buffers()) targets[name] = b;

  LoadReport report;
  for (const auto& [name, target] : targets)
    if (state.find(name) == state.end()) report.missing_keys.push_back(name);
  for (const auto& [name, t] : state)
    if (targets.find(name) == targets.end()) report.unexpected_keys.push_back(name);

  // Step 1) every shared name must agree in shape and dtype: all checked before any copy,
  // so a refused load leaves the model as it was.
  for (const auto& [name, t] : state) {
    auto it = targets.find(name);
    if (it == targets.end()) continue;
    const Tensor& dst = *it->second;
    MGPU_CHECK(t.defined(), source, ": '", name, "' is an undefined tensor");
    MGPU_CHECK(t.shape() == dst.shape() && t.dtype() == dst.dtype(), source, ": '", name,
               "' is ", dtype_name(t.dtype()), shape_str(t.shape()), " but the model's is ",
               dtype_name(dst.dtype()), shape_str(dst.shape()),
               " (a checkpoint of a different model, or the model built with other options?)");
  }
  if (strict && (!report.missing_keys.empty() || !report.unexpected_keys.empty())) {
    std::ostringstream os;
    os << source << ": the names do not match the model's";
    if (!report.missing_keys.empty())
      os << "; missing (in the model, not in the dict): " << join(report.missing_keys);
    if (!report.unexpected_keys.empty())
      os << "; unexpected (in the dict, not in the model): " << join(report.unexpected_keys);
    bool all_module = !report.unexpected_keys.empty();
    for (const std::string& n : report.unexpected_keys) all_module = all_module && starts_with(n, "module.");
    if (all_module)
      os << ". The dict's names start with 'module.': it was saved from a "
            "DistributedDataParallel wrapper. Save wrapper.module() instead, or load "
            "io::strip_prefix(dict, \"module.\")";
    MGPU_FAIL(os.str());
  }
  // Step 2) copy in place.
  for (const auto& [name, t] : state) {
    auto it = targets.find(name);
    if (it != targets.end()) copy_(*it->second, t);
  }
  return report;
}

StateDict strip_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : state) {
    const std::string key = starts_with(name, prefix) ? name.substr(prefix.size()) : name;
    MGPU_CHECK(out.emplace(key, t).second, "strip_prefix: '", name, "' and another name both become '",
               key, "' without '", prefix, "'");
  }
  return out;
}

StateDict add_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : state) out[prefix + name] = t;
  return out;
}

StateDict select_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (auto it = state.lower_bound(prefix); it != state.end() && starts_with(it->first, prefix); ++it)
    out[it->first.substr(prefix.size())] = it->second;
  return out;
}

Tensor scalar_i64(std::int64_t value) {
  Tensor t = Tensor::empty({}, DType::i64);
  *t.data<std::int64_t>() = value;
  return t;
}

Tensor scalar_f64(double value) {
  Tensor t = Tensor::empty({}, DType::f64);
  *t.data<double>() = value;
  return t;
}

Tensor scalar_u64(std::uint64_t value) {
  std::int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);  // the same 64 bits; i64 is the widest dtype
  return scalar_i64(bits);
}

namespace {
const Tensor& scalar(const StateDict& state, const std::string& key, const std::string& where,
                     DType dtype) {
  auto it = state.find(key);
  MGPU_CHECK(it != state.end(), where, ": '", key, "' is missing");
  MGPU_CHECK(it->second.numel() == 1 && it->second.dtype() == dtype, where, ": '", key, "' is ",
             it->second.str(), ", expected one ", dtype_name(dtype), " value");
  return it->second;
}
}  // namespace

std::int64_t get_i64(const StateDict& state, const std::string& key, const std::string& where) {
  return scalar(state, key, where, DType::i64).to_vector<std::int64_t>()[0];
}

double get_f64(const StateDict& state, const std::string& key, const std::string& where) {
  return scalar(state, key, where, DType::f64).to_vector<double>()[0];
}

std::uint64_t get_u64(const StateDict& state, const std::string& key, const std::string& where) {
  const std::int64_t bits = get_i64(state, key, where);
  std::uint64_t value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

StateDict scalars_to_state(const std::map<std::string, double>& scalars) {
  StateDict out;
  for (const auto& [name, value] : scalars) out[name] = scalar_f64(value);
  return out;
}

std::map<std::string, double> state_to_scalars(const StateDict& state, const std::string& where) {
  std::map<std::string, double> out;
  for (const auto& [name, t] : state) out[name] = get_f64(state, name, where);
  return out;
}

std::uint64_t fingerprint(const StateDict& state) {
  std::uint64_t h = kFnv1aOffsetBasis;
  for (const auto& entry : state) {
    const Tensor host = entry.second.to(Device::cpu());
    h = fnv1a64(host.raw_data(), host.nbytes(), h);
  }
  return h;
}

}  // namespace mgpu::io
