// Module: the parameter/buffer/children registry, modes, moves, and Sequential.
#include "mgpu/nn/module.h"

#include <algorithm>
#include <sstream>

#include "mgpu/ops.h"

namespace mgpu::nn {

Module::Module(const Module& other)
    : path_(other.path_),
      training_(other.training_),
      input_requires_grad_(other.input_requires_grad_),
      device_(other.device_),
      dtype_(other.dtype_) {
  for (const auto& [local, p] : other.params_) {
    auto copy = std::make_unique<Parameter>(p->name(), p->value.clone(), p->requires_grad());
    if (p->grad.defined()) copy->grad = p->grad.clone();
    params_.emplace_back(local, std::move(copy));
  }
  for (const auto& [name, b] : other.buffers_) buffers_.emplace_back(name, b.clone());
  for (const auto& [name, c] : other.children_) children_.emplace_back(name, c->clone());
}

std::size_t Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  for (const auto& p : params_)
    MGPU_CHECK(p.first != name, describe(), ": parameter '", name, "' registered twice");
  params_.emplace_back(name, std::make_unique<Parameter>(name, std::move(value), requires_grad));
  return params_.size() - 1;
}

std::size_t Module::register_buffer(const std::string& name, Tensor value) {
  check_defined("Module::register_buffer", value, name.c_str());
  buffers_.emplace_back(name, std::move(value));
  return buffers_.size() - 1;
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> child) {
  MGPU_CHECK(child != nullptr, "Module::register_module: child '", name, "' is null");
  for (const auto& c : children_)
    MGPU_CHECK(c.first != name, describe(), ": child '", name, "' registered twice");
  // Full dotted path: this module may already sit inside a tree.
  child->prefix_names(path_.empty() ? name : path_ + "." + name);
  children_.emplace_back(name, std::move(child));
}

void Module::replace_child(const std::string& local_name, std::shared_ptr<Module> child) {
  MGPU_CHECK(child != nullptr, describe(), ".replace_child('", local_name, "'): child is null");
  for (auto& c : children_) {
    if (c.first != local_name) continue;
    // The dotted path of this module from the root, then the child's own name.
    const std::string prefix = path_.empty() ? local_name : path_ + "." + local_name;
    child->prefix_names(prefix);
    c.second = std::move(child);
    return;
  }
  MGPU_FAIL(describe(), ".replace_child: no child named '", local_name, "'");
}

void Module::prefix_names(const std::string& prefix) {
  path_ = path_.empty() ? prefix : prefix + "." + path_;
  for (auto& p : params_) p.second->name_ = prefix + "." + p.second->name_;
  for (auto& c : children_) c.second->prefix_names(prefix);
}

void Module::collect_parameters(const std::string& prefix,
                                std::vector<std::pair<std::string, Parameter*>>& out) {
  for (auto& p : params_) out.emplace_back(prefix + p.first, p.second.get());
  for (auto& c : children_) c.second->collect_parameters(prefix + c.first + ".", out);
}

void Module::collect_buffers(const std::string& prefix,
                             std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& b : buffers_) out.emplace_back(prefix + b.first, &b.second);
  for (auto& c : children_) c.second->collect_buffers(prefix + c.first + ".", out);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect_parameters("", out);
  return out;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  return out;
}

namespace {

/// The entry of `named` called dotted_name; else throws, listing the names there are.
template <typename T>
T& find_named(const std::vector<std::pair<std::string, T*>>& named,
              const std::string& dotted_name, const std::string& owner, const char* kind) {
  std::string known;
  for (auto& [name, p] : named) {
    if (name == dotted_name) return *p;
    known += (known.empty() ? "" : ", ") + name;
  }
  MGPU_FAIL(owner, ": no ", kind, " named '", dotted_name, "' (", kind, "s: ", known, ")");
}

}  // namespace

Parameter& Module::parameter(const std::string& dotted_name) {
  return find_named(named_parameters(), dotted_name, describe(), "parameter");
}

Tensor& Module::buffer(const std::string& dotted_name) {
  return find_named(named_buffers(), dotted_name, describe(), "buffer");
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (Parameter* p : parameters()) n += p->value.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

Module& Module::to(const Device& device) {
  for (auto& [local, p] : params_) {
    p->value = p->value.to(device);
    if (p->grad.defined()) p->grad = p->grad.to(device);
  }
  for (auto& b : buffers_) b.second = b.second.to(device);
  for (auto& c : children_) c.second->to(device);
  clear_saved_self();
  device_ = device;
  return *this;
}

Module& Module::to(DType dtype) {
  MGPU_CHECK(is_floating(dtype), describe(), ".to(", dtype_name(dtype),
             "): modules hold floating-point parameters (f32, f64, f16, bf16)");
  for (auto& [local, p] : params_) {
    if (!is_floating(p->value.dtype())) continue;
    p->value = p->value.to(dtype);
    if (p->grad.defined()) p->grad = p->grad.to(dtype);
  }
  for (auto& b : buffers_)
    if (is_floating(b.second.dtype())) b.second = b.second.to(dtype);
  for (auto& c : children_) c.second->to(dtype);
  clear_saved_self();
  dtype_ = dtype;
  return *this;
}

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

void Module::clear_saved() {
  clear_saved_self();
  for (auto& c : children_) c.second->clear_saved();
}

std::size_t Module::saved_forwards() const {
  std::size_t most = saved_self();
  for (const auto& c : children_) most = std::max(most, c.second->saved_forwards());
  return most;
}

namespace {
thread_local std::int64_t current_context_id = ContextScope::kNone;
}  // namespace

ContextScope::ContextScope(std::int64_t id) : previous_(current_context_id) {
  current_context_id = id;
}

ContextScope::~ContextScope() { current_context_id = previous_; }

std::int64_t ContextScope::current() { return current_context_id; }

std::string Module::summary(int indent) const {
  std::ostringstream os;
  os << describe();
  for (const auto& [name, c] : children_)
    os << "\n" << std::string(static_cast<std::size_t>(indent) + 2, ' ') << "(" << name
       << "): " << c->summary(indent + 2);
  return os.str();
}

// ---- Sequential --------------------------------------------------------------------------

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) add(std::move(l));
}

Sequential& Sequential::add(std::shared_ptr<Module> layer) {
  MGPU_CHECK(layer != nullptr, "Sequential::add: layer ", num_children(), " is null");
  register_module(std::to_string(num_children()), std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (std::size_t i = 0; i < num_children(); ++i) h = child_at(i)->forward(h);
  return h;
}

Tensor Sequential::backward(const Tensor& grad_out) {
  Tensor g = grad_out;
  for (std::size_t i = num_children(); i-- > 0;) g = child_at(i)->backward(g);
  return g;
}

void Sequential::set_input_requires_grad(bool on) {
  Module::set_input_requires_grad(on);
  // A layer's input needs a gradient when the model's input does, or when a layer before
  // it has parameters.
  bool needed = on;
  for (std::size_t i = 0; i < num_children(); ++i) {
    child_at(i)->set_input_requires_grad(needed);
    if (!child_at(i)->parameters().empty()) needed = true;
  }
}

std::shared_ptr<Module> Sequential::clone() const {
  return std::shared_ptr<Module>(new Sequential(*this));
}

}  // namespace mgpu::nn
