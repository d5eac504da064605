// The MoE layer's one step, written to a safetensors file for bench/moe_torch.py (its PyTorch
// twin) to replay: the layer (mgpu::parallel::moe::MoE, one process, on the CPU) built from
// flags, one forward and backward of L = <y, w> + the auxiliary loss on a random x and w.
//
//   build/bench/moe_export --out moe.safetensors --dim 16 --hidden 32 --experts 8 --k 2
//                          --capacity-factor 1.0 --aux-alpha 0.01 --tokens 64 --dtype f64
//
// The file holds every parameter under the layer's names ("router.weight",
// "experts.3.fc1.weight", ...), x [N, M], w [N, M], y, dx, every parameter's gradient
// ("grad.<name>"), the routing (routing.expert [N, k] i64, routing.slot [N, k] i64 with -1
// for a dropped choice, routing.weight [N, k] f64), the counts (stats.routed_per_expert,
// stats.tokens_per_expert, i64), aux_loss (0-d f64), and the configuration in the metadata.
//
// The layer keeps its routing to itself; the routing written here is lesson 16's functions
// applied to the router's probabilities computed as the layer computes them (the same ops on
// the same CPU: the same bits), checked against the layer's statistics before writing.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/app/flags.h"
#include "mgpu/error.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "mgpu/parallel/moe/routing.h"

namespace {

using mgpu::DType;
using mgpu::Tensor;
namespace moe = mgpu::parallel::moe;

// 17 significant digits: a double read back by Python's float() is the same double.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::vector<double> parse_bias(const std::string& text) {
  std::vector<double> bias;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MGPU_CHECK(used > 0 && used == item.size(), "--bias: '", item, "' is not a number (give E "
               "numbers separated by commas: \"0.1,0,-0.1,...\")");
    bias.push_back(v);
  }
  return bias;
}

Tensor uniform(std::int64_t rows, std::int64_t cols, DType dtype, std::uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, dtype);
  mgpu::uniform_(t, seed, -1.0, 1.0);
  return t;
}

Tensor i64(const std::vector<std::int64_t>& v, mgpu::Shape shape) {
  return Tensor::from_vector(v, shape);
}

}  // namespace

int main(int argc, char** argv) {
  moe::MoEConfig c;
  c.dim = 16;
  c.hidden = 32;
  c.experts = 8;
  c.k = 2;
  std::int64_t tokens = 64;
  std::uint64_t seed = 1;
  std::string dtype_name = "f64", bias_text, out;
  CLI::App cli{"The MoE layer's forward and backward of L = <y, w> + aux, written to a "
               "safetensors file for bench/moe_torch.py."};
  cli.add_option("--out", out, "the safetensors file to write")->required();
  cli.add_option("--dim", c.dim, "M, the model's width")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  cli.add_option("--hidden", c.hidden, "F, each expert's hidden features")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  cli.add_option("--experts", c.experts, "E, experts in the layer")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  cli.add_option("--k", c.k, "experts per token (1 <= k <= E)")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  cli.add_option("--capacity-factor", c.capacity_factor,
                 "slots per expert = ceil(factor * N * k / E); <= 0: dropless")
      ->capture_default_str();
  cli.add_option("--aux-alpha", c.aux_alpha, "the auxiliary loss's alpha (0: none)")
      ->check(mgpu::app::non_negative_real())->capture_default_str();
  cli.add_option("--tokens", tokens, "N, the tokens of x")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  cli.add_option("--seed", seed, "the parameters' seed (x and w: seed + 1000, seed + 2000)")
      ->capture_default_str();
  cli.add_option("--dtype", dtype_name, "the layer's and x's dtype (the router: f32 for f32)")
      ->check(CLI::IsMember({"f64", "f32"}))->capture_default_str();
  cli.add_option("--bias", bias_text, "the balancing bias, E values \"b0,b1,...\" (default: none)");
  MGPU_PARSE_FLAGS(cli, argc, argv);

  try {
    const DType dtype = dtype_name == "f64" ? DType::f64 : DType::f32;
    const std::int64_t N = tokens, M = c.dim, E = c.experts, k = c.k;
    // Step 1) The layer, its parameters drawn as nn::Linear draws them, and the bias.
    mgpu::nn::manual_seed(seed);
    moe::MoE layer(c);
    layer.to(dtype);
    std::vector<double> bias;
    if (!bias_text.empty()) {
      bias = parse_bias(bias_text);
      layer.set_expert_bias(bias);
    }

    // Step 2) One forward and backward: dL/dy = w, the auxiliary loss's gradient added by
    // the layer.
    const Tensor x = uniform(N, M, dtype, seed + 1000);
    const Tensor w = uniform(N, M, dtype, seed + 2000);
    layer.train();
    layer.zero_grad();
    const Tensor y = layer.forward(x);
    const moe::MoEStats stats = layer.stats();
    const Tensor dx = layer.backward(w);

    // Step 3) The routing, as the layer's forward computes it (router in f32, f64 for f64).
    const DType rd = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tensor probs = mgpu::softmax(
        mgpu::matmul(mgpu::cast(x, rd), mgpu::cast(layer.router_weight().value, rd), false, true));
    const moe::Routing r = moe::route_top_k(probs, k, bias);
    const std::int64_t capacity = moe::expert_capacity(N, k, E, c.capacity_factor);
    const std::vector<std::int64_t> slots = moe::capacity_slots(r, capacity);
    std::vector<std::int64_t> expert(r.expert.begin(), r.expert.end());
    std::vector<std::int64_t> kept(E, 0), routed(E, 0);
    std::int64_t dropped = 0;
    for (std::int64_t i = 0; i < N * k; ++i) {
      ++routed[expert[i]];
      if (slots[i] >= 0) ++kept[expert[i]];
      else ++dropped;
    }
    MGPU_CHECK(routed == stats.routed_per_expert && kept == stats.tokens_per_expert &&
                   dropped == stats.dropped && capacity == stats.capacity,
               "moe_export: the routing recomputed here differs from the layer's statistics");

    // Step 4) The file.
    mgpu::io::TensorDict t;
    for (auto& [name, p] : layer.named_parameters()) {
      t[name] = p->value;
      t["grad." + name] = p->grad;
    }
    t["x"] = x;
    t["w"] = w;
    t["y"] = y;
    t["dx"] = dx;
    t["routing.expert"] = i64(expert, {N, k});
    t["routing.slot"] = i64(slots, {N, k});
    t["routing.weight"] = Tensor::from_vector(r.weight, {N, k});
    t["stats.routed_per_expert"] = i64(stats.routed_per_expert, {E});
    t["stats.tokens_per_expert"] = i64(stats.tokens_per_expert, {E});
    t["aux_loss"] = Tensor::from_vector(std::vector<double>{stats.aux_loss}, {});
    std::string bias_meta;
    for (std::size_t e = 0; e < bias.size(); ++e) bias_meta += (e ? "," : "") + exact(bias[e]);
    const mgpu::io::Metadata meta{
        {"dim", std::to_string(M)},         {"hidden", std::to_string(c.hidden)},
        {"experts", std::to_string(E)},     {"k", std::to_string(k)},
        {"capacity_factor", exact(c.capacity_factor)},
        {"aux_alpha", exact(c.aux_alpha)},  {"tokens", std::to_string(N)},
        {"seed", std::to_string(seed)},     {"dtype", dtype_name},
        {"bias", bias_meta},                {"capacity", std::to_string(capacity)},
        {"dropped", std::to_string(dropped)}, {"layer", layer.describe()}};
    mgpu::io::save_safetensors(out, t, meta);
    std::printf("%s: N=%lld, capacity %lld, %lld of %lld choices dropped, aux %.6g -> %s\n",
                layer.describe().c_str(), static_cast<long long>(N),
                static_cast<long long>(capacity), static_cast<long long>(dropped),
                static_cast<long long>(N * k), stats.aux_loss, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_export: %s\n", e.what());
    return 1;
  }
}
