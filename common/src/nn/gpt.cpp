// The GPT decoder: MLP, Block and the model around them (see gpt.h).
#include "mgpu/nn/gpt.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "mgpu/nn/activation.h"
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/init.h"
#include "mgpu/nn/linear.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

// ---- GPTConfig -------------------------------------------------------------------------------

GPTConfig GPTConfig::tiny(std::int64_t vocab_size) {
  GPTConfig c;
  c.vocab_size = vocab_size;
  return c;
}

GPTConfig GPTConfig::gpt2_small() { return GPTConfig{50257, 1024, 12, 12, 768}; }

std::int64_t GPTConfig::num_parameters() const {
  const std::int64_t C = n_embd;
  // Per block: 2 LayerNorms (4C), attention (3C² + 3C, C² + C), MLP (4C² + 4C, 4C² + C).
  const std::int64_t per_block = 12 * C * C + 13 * C;
  return vocab_size * C + block_size * C + n_layer * per_block + 2 * C;
}

std::string GPTConfig::str() const {
  std::ostringstream os;
  os << n_layer << " layers, " << n_head << " heads, C = " << n_embd << ", T = " << block_size
     << ", vocabulary " << vocab_size;
  return os.str();
}

// ---- MLP ---------------------------------------------------------------------------------------

MLP::MLP(std::int64_t n_embd) : embd_(n_embd) {
  register_module("c_fc", std::make_shared<Linear>(n_embd, 4 * n_embd));
  register_module("gelu", std::make_shared<GELU>());
  register_module("c_proj", std::make_shared<Linear>(4 * n_embd, n_embd));
}

std::string MLP::describe() const { return "MLP(n_embd=" + std::to_string(embd_) + ")"; }

Tensor MLP::forward(const Tensor& x) {
  MGPU_CHECK(x.ndim() == 3 && x.size(2) == embd_, describe(), ": input is ", x.str(),
             ", expected [B, T, ", embd_, "]");
  Tensor h = x.reshape({x.size(0) * x.size(1), embd_});
  for (std::size_t i = 0; i < 3; ++i) h = child_at(i)->forward(h);
  return h.reshape(x.shape());
}

Tensor MLP::backward(const Tensor& grad_out) {
  Tensor g = grad_out.reshape({grad_out.numel() / embd_, embd_});
  for (std::size_t i = 3; i-- > 0;) g = child_at(i)->backward(g);
  return g.defined() ? g.reshape(grad_out.shape()) : g;
}

// ---- Block -------------------------------------------------------------------------------------

Block::Block(std::int64_t n_embd, std::int64_t n_head) {
  register_module("ln_1", std::make_shared<LayerNorm>(n_embd));
  register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head));
  register_module("ln_2", std::make_shared<LayerNorm>(n_embd));
  register_module("mlp", std::make_shared<MLP>(n_embd));
}

std::string Block::describe() const { return "Block"; }

Tensor Block::forward(const Tensor& x) {
  return policy_ == RecomputePolicy::full && is_training() ? forward_full(x) : forward_plain(x);
}

Tensor Block::backward(const Tensor& grad_out) {
  // A forward under full kept its input here; every other forward kept the children's
  // contexts.
  return saved_.size() > 0 ? backward_full(grad_out) : backward_plain(grad_out);
}

Tensor Block::forward_plain(const Tensor& x) {
  // Pre-LayerNorm residual branches: each adds its output to what passes by.
  Tensor h = add(x, child_at(1)->forward(child_at(0)->forward(x)));
  return add(h, child_at(3)->forward(child_at(2)->forward(h)));
}

Tensor Block::backward_plain(const Tensor& grad_out) {
  // A residual sum sends its gradient both ways: straight through, and into the branch.
  Tensor dh = grad_out.clone();
  add_(dh, child_at(2)->backward(child_at(3)->backward(grad_out)));
  Tensor dx = dh.clone();
  add_(dx, child_at(0)->backward(child_at(1)->backward(dh)));
  return dx;
}

void Block::keep_input(const Tensor& x) {
  saved_.push(describe(), KeptInput{x, amp::is_autocast_enabled(), amp::autocast_dtype()});
}

Tensor Block::forward_kept() {
  const KeptInput kept = saved_.pop(describe());
  if (!kept.autocast) {
    amp::Autocast off(DType::bf16, /*enabled=*/false);
    return forward_plain(kept.x);
  }
  amp::Autocast region(kept.autocast_dtype);
  return forward_plain(kept.x);
}

void Block::set_recompute(RecomputePolicy policy) {
  MGPU_CHECK(saved_forwards() == 0, describe(), ": set_recompute(", recompute_name(policy),
             ") between a forward and its backward");
  policy_ = policy;
  static_cast<CausalSelfAttention&>(*child_at(1)).set_keep_probs(policy != RecomputePolicy::attn);
}

// ---- GPT ---------------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& config) : config_(config) {
  const GPTConfig& c = config;
  MGPU_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 &&
                 c.n_embd > 0 && c.n_embd % c.n_head == 0,
             "GPT(", c.str(), "): every size must be positive and n_embd a multiple of n_head");
  register_module("transformer.wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  register_module("transformer.wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  for (std::int64_t l = 0; l < c.n_layer; ++l)
    register_module("transformer.h." + std::to_string(l), std::make_shared<Block>(c.n_embd, c.n_head));
  register_module("transformer.ln_f", std::make_shared<LayerNorm>(c.n_embd));
  // GPT-2's initialisation (the LayerNorms keep their ones and zeros).
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (name.find(".ln_") != std::string::npos) continue;
    if (bias) {
      fill_(p->value, 0.0);
    } else {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      normal_(p->value, next_seed(), 0.0, residual ? residual_std : 0.02);
    }
  }
}

std::string GPT::describe() const { return "GPT(" + config_.str() + ")"; }

Tensor GPT::forward(const Tensor& ids) {
  check_defined("GPT", ids, "ids");
  MGPU_CHECK(ids.ndim() == 2 && ids.size(1) >= 1 && ids.size(1) <= config_.block_size,
             describe(), ": ids are ", ids.str(), ", expected [B, T] with 1 <= T <= ",
             config_.block_size, " (the model's block_size)");
  const std::int64_t B = ids.size(0), T = ids.size(1), C = config_.n_embd;
  // Step 1) token embedding plus position embedding (the same positions 0..T-1 in every row).
  std::vector<std::int64_t> positions(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = t;
  Tensor x = child_at(0)->forward(ids);  // [B, T, C]
  const Tensor pos = child_at(1)->forward(Tensor::from_vector(positions, {T}, ids.device()));
  Tensor rows = x.reshape({B, T * C});
  add_rowwise_(rows, pos.reshape({T * C}));
  // Step 2) the blocks, then the final LayerNorm.
  for (std::int64_t l = 0; l < config_.n_layer; ++l) x = child_at(2 + static_cast<std::size_t>(l))->forward(x);
  x = child_at(num_children() - 1)->forward(x);
  // Step 3) the head: scores against every token's embedding (the tied weight).
  const Tensor hidden = x.reshape({B * T, C});
  if (is_training()) saved_.push(describe(), Saved{hidden, B, T});
  return matmul(hidden, wte().weight().value, false, true).reshape({B, T, config_.vocab_size});
}

Tensor GPT::backward(const Tensor& grad_logits) {
  Saved s = saved_.pop(describe());
  const std::int64_t B = s.batch, T = s.time, C = config_.n_embd, V = config_.vocab_size;
  MGPU_CHECK(grad_logits.shape() == Shape({B, T, V}), describe(), ": grad_logits is ",
             grad_logits.str(), " but the logits were ", shape_str({B, T, V}));
  const Tensor g = grad_logits.reshape({B * T, V});
  Parameter& table = wte().weight();
  // The head's share of the token table's gradient, added silently: the table's gradient is
  // final only after the lookup's share too (Embedding::backward announces it).
  if (table.requires_grad()) matmul_out(table.grad, g, s.final_hidden, true, false, 1.0, 1.0);
  Tensor dx = matmul(g, table.value).reshape({B, T, C});
  dx = child_at(num_children() - 1)->backward(dx);
  for (std::int64_t l = config_.n_layer; l-- > 0;) dx = child_at(2 + static_cast<std::size_t>(l))->backward(dx);
  // Every row used positions 0..T-1: the position table gets the sum over the batch.
  child_at(1)->backward(sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
  child_at(0)->backward(dx);
  return Tensor();
}

double gpt_loss_step(GPT& model, const Tensor& ids, const Tensor& targets) {
  const Tensor logits = model.forward(ids);
  const std::int64_t V = logits.size(2), N = logits.numel() / V;
  Tensor probs;
  const double loss = softmax_cross_entropy(logits.reshape({N, V}), targets.reshape({N}), &probs)
                          .to_vector<double>()[0];
  model.backward(softmax_cross_entropy_backward(probs, targets.reshape({N})).reshape(logits.shape()));
  return loss;
}

}  // namespace mgpu::nn
