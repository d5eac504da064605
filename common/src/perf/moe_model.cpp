// The parameters of a (mixture-of-experts) transformer, layer by layer (mgpu/perf/moe_model.h):
// the total, what one token uses, what expert parallelism splits.
#include <cmath>

#include "mgpu/perf/moe_model.h"
#include "mgpu/perf/planner.h"

namespace mgpu::perf {

bool is_moe_layer(const ModelShape& m, std::int64_t layer) {
  if (m.moe.experts <= 0 || layer < m.moe.first_dense) return false;
  return (layer - m.moe.first_dense) % (m.moe.every > 0 ? m.moe.every : 1) == 0;
}

std::int64_t moe_layers_in(const ModelShape& m, std::int64_t first, std::int64_t last) {
  std::int64_t n = 0;
  for (std::int64_t l = first; l < last; ++l) n += is_moe_layer(m, l) ? 1 : 0;
  return n;
}

double attention_parameters(const ModelShape& m) {
  if (m.attention_params > 0) return m.attention_params;
  const double C = static_cast<double>(m.n_embd);
  return 4 * C * C + (m.biases ? 4 * C : 0);  // QKV and the projection, with their biases
}

double mlp_parameters(const ModelShape& m, double hidden) {
  const double C = static_cast<double>(m.n_embd);
  if (m.gated_mlp) return 3 * C * hidden;  // gate, up, down (SwiGLU has no biases)
  return 2 * C * hidden + (m.biases ? hidden + C : 0);
}

double block_norm_parameters(const ModelShape& m) {
  return (m.biases ? 4.0 : 2.0) * static_cast<double>(m.n_embd);
}

namespace {

double dense_hidden(const ModelShape& m) {
  return m.ffn_hidden > 0 ? static_cast<double>(m.ffn_hidden) : 4.0 * static_cast<double>(m.n_embd);
}

double expert_hidden(const ModelShape& m) {
  return m.moe.expert_hidden > 0 ? static_cast<double>(m.moe.expert_hidden) : dense_hidden(m);
}

double embedding_parameters(const ModelShape& m, bool count_positions) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  double p = V * C + (m.tied_head ? 0 : V * C) + block_norm_parameters(m) / 2;  // + final norm
  if (count_positions && !m.rotary) p += static_cast<double>(m.position_rows()) * C;
  return p;
}

}  // namespace

double routed_expert_parameters(const ModelShape& m) {
  return static_cast<double>(m.moe.experts) * mlp_parameters(m, expert_hidden(m));
}

double block_parameters(const ModelShape& m, std::int64_t layer, bool active) {
  double p = attention_parameters(m) + block_norm_parameters(m);
  if (!is_moe_layer(m, layer)) return p + mlp_parameters(m, dense_hidden(m));
  const double C = static_cast<double>(m.n_embd);
  const double routed = static_cast<double>(active ? m.moe.top_k : m.moe.experts);
  const double experts = routed + static_cast<double>(m.moe.shared_experts);
  return p + static_cast<double>(m.moe.experts) * C + experts * mlp_parameters(m, expert_hidden(m));
}

double block_matmul_parameters(const ModelShape& m, std::int64_t layer) {
  const double C = static_cast<double>(m.n_embd);
  const double attention = m.attention_params > 0 ? m.attention_params : 4 * C * C;
  const double matrices = m.gated_mlp ? 3 : 2;
  if (!is_moe_layer(m, layer)) return attention + matrices * C * dense_hidden(m);
  const double experts = static_cast<double>(m.moe.top_k + m.moe.shared_experts);
  return attention + static_cast<double>(m.moe.experts) * C +  // the router's product
         experts * matrices * C * expert_hidden(m);
}

std::int64_t ModelShape::parameters() const {
  double p = embedding_parameters(*this, true);
  for (std::int64_t l = 0; l < n_layer; ++l) p += block_parameters(*this, l, false);
  return static_cast<std::int64_t>(std::llround(p));
}

std::int64_t ModelShape::active_parameters() const {
  double p = embedding_parameters(*this, true);
  for (std::int64_t l = 0; l < n_layer; ++l) p += block_parameters(*this, l, true);
  return static_cast<std::int64_t>(std::llround(p));
}

}  // namespace mgpu::perf
