// The MoE layer's forward and backward. Step by step as the file comment of moe_layer.h
// draws it; each step that is lesson 16's is a call to its function (routing.h,
// dispatch_plan.h, expert_exchange.h, load_balance.h).
#include <numeric>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/moe/dispatch_plan.h"
#include "mgpu/parallel/moe/load_balance.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "mgpu/parallel/moe/routing.h"

namespace mgpu::parallel::moe {

namespace {

// The router computes in f32 whatever the compute dtype; f64 stays f64 (gradient checks).
DType router_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : cast(t, dtype); }

// [rows, 1] -> [rows, cols], each row's value across its row: an outer product with ones
// (one small GEMM on the tensor's device; exact, each value times 1).
Tensor across_rows(const Tensor& column, std::int64_t cols) {
  const Tensor ones = Tensor::full({1, cols}, 1.0, column.dtype(), column.device());
  return matmul(column, ones);
}

// Rows per local expert: expert l's block holds every rank's rows for it.
std::vector<std::int64_t> rows_per_local_expert(const ExpertExchange& ex) {
  const std::int64_t L = ex.local_experts;
  std::vector<std::int64_t> rows(L, 0);
  for (int q = 0; q < ex.ep_size; ++q)
    for (std::int64_t l = 0; l < L; ++l) rows[l] += ex.recv_counts[q * L + l];
  return rows;
}

}  // namespace

Tensor MoE::forward(const Tensor& input) {
  const MoEConfig& c = config_;
  const std::int64_t M = c.dim, E = c.experts, k = c.k, L = local_experts();
  MGPU_CHECK(input.ndim() >= 1 && input.shape().back() == M, describe(), ": input is ",
             input.str(), ", expected [..., ", M, "]");
  const Tensor x = input.reshape({input.numel() / M, M});
  const std::int64_t N = x.size(0);
  const Device dev = x.device();
  const DType rd = router_dtype(x.dtype());

  // Step 1) The router: logits and probs [N, E] in f32 (f64 for f64 inputs).
  const Tensor x_router = as_dtype(x, rd);
  const Tensor w_router = as_dtype(router_weight().value, rd);
  const Tensor probs = softmax(matmul(x_router, w_router, false, true));

  // Step 2) On the host (the forward's one wait for the device): top-k, the auxiliary loss,
  // capacity and the plan, then the counts exchanged over the EP group.
  const Tensor probs_host = probs.to(Device::cpu());
  const Routing routing = route_top_k(probs_host, k, bias_);
  AuxLoss aux;
  if (c.aux_alpha > 0) aux = switch_aux_loss(probs_host, routing, c.aux_alpha);
  const std::int64_t capacity = expert_capacity(N, k, E, c.capacity_factor);
  const std::vector<std::int64_t> slots = capacity_slots(routing, capacity);
  const DispatchPlan plan = make_dispatch_plan(routing, slots, group_->size());
  const ExpertExchange ex = exchange_counts(plan, *group_);

  const std::int64_t S = static_cast<std::int64_t>(plan.order.size());
  std::vector<std::int64_t> row_token(S);
  std::vector<double> row_weight(S);
  for (std::int64_t i = 0; i < S; ++i) {
    row_token[i] = plan.order[i] / k;
    row_weight[i] = routing.weight[plan.order[i]];
  }

  // Step 3) Dispatch: this rank's kept choices' rows in the plan's order, to their experts.
  const Tensor send = S > 0 ? nn::embedding(row_token, {S}, x)
                            : Tensor::empty({0, M}, x.dtype(), dev);
  const Tensor received = to_experts(send, ex, *group_);

  // Step 4) The grouped product: each local expert on its contiguous block of rows.
  const std::vector<std::int64_t> expert_rows = rows_per_local_expert(ex);
  Tensor expert_out = Tensor::empty(received.shape(), x.dtype(), dev);
  for (std::int64_t l = 0, at = 0; l < L; at += expert_rows[l], ++l) {
    if (expert_rows[l] == 0) continue;  // an expert with no rows runs nothing
    const Tensor out = local_expert(l).forward(received.slice(at, at + expert_rows[l]));
    Tensor dst = expert_out.slice(at, at + expert_rows[l]);
    cast_(dst, out);
  }

  // Step 5) Combine: the rows back to their tokens' rank, y[n] = Σ_j weight[n, j] · row(n, j)
  // (a scatter-add of the weighted rows; a dropped choice adds nothing).
  const Tensor back = from_experts(expert_out, ex, *group_);
  Tensor y = Tensor::zeros({N, M}, x.dtype(), dev);
  Tensor weight_across;
  if (S > 0) {
    weight_across = across_rows(Tensor::from_vector(row_weight, {S, 1}, dev).to(x.dtype()), M);
    nn::embedding_backward_(y, row_token, {S}, mul(back, weight_across));
  }

  // The statistics of this forward, and the load the bias balances.
  stats_ = MoEStats{};
  stats_.tokens = N;
  stats_.capacity = capacity;
  stats_.routed_per_expert.assign(E, 0);
  for (std::int32_t e : routing.expert) ++stats_.routed_per_expert[e];
  stats_.tokens_per_expert = plan.tokens_per_expert;
  stats_.dropped = N * k - S;
  for (std::int64_t n = 0; n < N; ++n) {
    bool any = false;
    for (std::int64_t j = 0; j < k; ++j) any = any || slots[n * k + j] >= 0;
    stats_.tokens_all_dropped += any ? 0 : 1;
  }
  stats_.expert_rows = expert_rows;
  stats_.rows_sent = S;
  stats_.rows_received = received.size(0);
  stats_.aux_loss = aux.value;

  if (is_training()) {
    for (std::int64_t e = 0; e < E; ++e) load_[e] += stats_.routed_per_expert[e];
    // What the backward needs of the routing, from the host's copy of probs.
    const std::vector<double> p = probs_host.to_vector<double>();
    std::vector<double> inv_chosen(N * k);
    std::vector<std::int64_t> prob_index(N * k);
    for (std::int64_t n = 0; n < N; ++n) {
      double chosen = 0;
      for (std::int64_t j = 0; j < k; ++j) chosen += p[n * E + routing.expert[n * k + j]];
      for (std::int64_t j = 0; j < k; ++j) {
        inv_chosen[n * k + j] = 1.0 / chosen;
        prob_index[n * k + j] = n * E + routing.expert[n * k + j];
      }
    }
    Saved s;
    s.shape = input.shape();
    s.x_router = x_router;
    s.w_router = w_router;
    s.probs = probs;
    if (c.aux_alpha > 0) s.aux_grad = aux.grad_probs.to(dev);
    s.weights = Tensor::from_vector(routing.weight, {N, k}, dev).to(rd);
    s.inv_chosen = Tensor::from_vector(inv_chosen, {N, k}, dev).to(rd);
    s.row_weight = weight_across;
    s.back = back;
    s.row_token = std::move(row_token);
    s.row_choice = plan.order;
    s.prob_index = std::move(prob_index);
    s.expert_rows = expert_rows;
    s.exchange = ex;
    saved_.push("MoE", std::move(s));
  }
  return y.reshape(input.shape());
}

Tensor MoE::backward(const Tensor& grad_out) {
  const MoEConfig& c = config_;
  const std::int64_t M = c.dim, E = c.experts, k = c.k, L = local_experts();
  Saved s = saved_.pop("MoE");
  const std::int64_t N = s.x_router.size(0), S = static_cast<std::int64_t>(s.row_token.size());
  MGPU_CHECK(grad_out.numel() == N * M, describe(), ": grad_out is ", grad_out.str(),
             " for an input of ", N, " x ", M);
  const Tensor dy = grad_out.reshape({N, M});
  const Device dev = dy.device();
  const DType xd = s.back.dtype(), rd = s.probs.dtype();

  // Step 1) The combine's backward: d row(n, j) = weight[n, j] · dy[n], and
  // d weight[n, j] = <dy[n], row(n, j)> for each kept choice.
  Tensor d_back = Tensor::empty({S, M}, xd, dev);
  Tensor d_weight_rows;  // [S, 1], router dtype
  if (S > 0) {
    const Tensor dy_rows = nn::embedding(s.row_token, {S}, as_dtype(dy, xd));
    d_back = mul(dy_rows, s.row_weight);
    d_weight_rows = as_dtype(sum(mul(dy_rows, s.back), 1), rd).reshape({S, 1});
  }

  // Step 2) The experts' backward: the row gradients to the experts (the gradient of a
  // combine is a dispatch), each local expert backward on its block, and back.
  const Tensor d_expert_out = to_experts(d_back, s.exchange, *group_);
  Tensor d_received = Tensor::empty(d_expert_out.shape(), xd, dev);
  std::vector<std::int64_t> begin(L, 0);
  for (std::int64_t l = 1; l < L; ++l) begin[l] = begin[l - 1] + s.expert_rows[l - 1];
  for (std::int64_t l = L; l-- > 0;) {
    ExpertMLP& expert = local_expert(l);
    if (s.expert_rows[l] == 0) {  // no rows, no gradient: its gradient is final as it is
      for (nn::Parameter* p : expert.parameters()) p->notify_grad_ready();
      continue;
    }
    const std::int64_t a = begin[l], b = a + s.expert_rows[l];
    const Tensor g = expert.backward(d_expert_out.slice(a, b));
    Tensor dst = d_received.slice(a, b);
    cast_(dst, g);
  }
  // The rows' gradients back to their tokens (skipped, on every rank alike, when the input
  // needs no gradient: the experts' parameter gradients are complete already).
  const bool want_dx = input_requires_grad();
  Tensor dx;
  if (want_dx) {
    const Tensor d_send = from_experts(d_received, s.exchange, *group_);
    dx = Tensor::zeros({N, M}, xd, dev);
    if (S > 0) nn::embedding_backward_(dx, s.row_token, {S}, d_send);
  }

  // Step 3) Through the renormalisation w_j = p_j / Σ_i p_i (over the chosen, dropped or
  // not): d p_j = (d w_j − Σ_i d w_i · w_i) / Σ_i p_i, then scattered into d probs [N, E].
  Tensor d_weight = Tensor::zeros({N * k, 1}, rd, dev);
  if (S > 0) nn::embedding_backward_(d_weight, s.row_choice, {S}, d_weight_rows);
  d_weight = d_weight.reshape({N, k});
  const Tensor dot = sum(mul(d_weight, s.weights), 1).reshape({N, 1});
  const Tensor d_chosen = mul(sub(d_weight, across_rows(dot, k)), s.inv_chosen);
  Tensor d_probs = Tensor::zeros({N * E, 1}, rd, dev);
  nn::embedding_backward_(d_probs, s.prob_index, {N * k}, d_chosen.reshape({N * k, 1}));
  d_probs = d_probs.reshape({N, E});
  if (s.aux_grad.defined()) add_(d_probs, s.aux_grad);  // the auxiliary loss's part

  // Step 4) Softmax and the router's product: its weight's gradient and its part of dx.
  const Tensor d_logits = softmax_backward(d_probs, s.probs);
  nn::Parameter& w = router_weight();
  add_(w.grad, as_dtype(matmul(d_logits, s.x_router, true, false), w.grad.dtype()));
  w.notify_grad_ready();
  if (!want_dx) return Tensor();
  add_(dx, as_dtype(matmul(d_logits, s.w_router), xd));
  return dx.reshape(s.shape);
}

}  // namespace mgpu::parallel::moe
