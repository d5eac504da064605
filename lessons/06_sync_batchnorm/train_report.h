/// @file train_report.h
/// @brief What lesson 06's program sets up and prints around its training loop: the
/// BatchNorm layers it found, the SyncBatchNorm steps on the trace, and the test set
/// evaluated in train mode. Program-only: the tests do not use it.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm.h"

namespace mgpu::lesson06 {

/// "91.23%" (a gap may be negative: "-0.41%").
inline std::string pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * fraction);
  return text;
}

/// Every layer of type Layer (BatchNorm, SyncBatchNorm) in a model tree, depth first.
template <typename Layer>
void find_layers(nn::Module& m, std::vector<Layer*>& out) {
  if (auto* l = dynamic_cast<Layer*>(&m)) out.push_back(l);
  for (const auto& child : m.children()) find_layers(*child.second, out);
}

/// "BatchNorm layers: 2 (channels 16 32); ..." for `model` (before any conversion): what
/// each step synchronises with `sync_bn`. Throws when the model has no BatchNorm.
inline std::string batchnorm_line(nn::Module& model, const std::string& name, bool sync_bn) {
  std::vector<nn::BatchNorm*> batchnorms;
  find_layers(model, batchnorms);
  MGPU_CHECK(!batchnorms.empty(), "--model ", name, " has no BatchNorm layer; this lesson ",
             "needs one (cnn, cnn-small or mlp-bn)");
  std::string channels;
  for (nn::BatchNorm* bn : batchnorms) channels += " " + std::to_string(bn->num_features());
  return "BatchNorm layers: " + std::to_string(batchnorms.size()) + " (channels" + channels +
         "); " + (sync_bn ? "SyncBatchNorm: per step and layer one all_gather of W x (2C+1) and "
                            "one all_reduce of 2C values"
                          : "each rank normalises with its own batch's statistics");
}

/// Each synchronised step of every SyncBatchNorm of `model` on the trace's "syncbn" track,
/// with the bytes its collective delivered (while the trace is on).
inline void trace_sync_steps(nn::Module& model, app::Trace& trace) {
  if (!trace.on()) return;
  std::vector<parallel::SyncBatchNorm*> synced;
  find_layers(model, synced);
  for (parallel::SyncBatchNorm* l : synced)
    l->set_step_observer([&trace](const char* what, double b, double e, std::int64_t bytes) {
      trace.span("syncbn", what, b, e, {{"bytes", static_cast<double>(bytes)}});
    });
}

/// The test set in train mode: every batch normalised with its own statistics (the rank's
/// batch, or the world's for SyncBatchNorm), as during training. The running statistics
/// are put back afterwards: this pass must not move them.
inline app::EvalResult evaluate_in_train_mode(nn::Module& model, data::DataLoader& loader,
                                              dist::ProcessGroup& cpu_group) {
  std::vector<Tensor> saved;
  for (auto& b : model.named_buffers()) saved.push_back(b.second->clone());
  model.train();
  const app::EvalResult r = app::evaluate(
      [&](const Tensor& x) {
        Tensor y = model.forward(x);
        model.clear_saved();  // no backward follows
        return y;
      },
      loader, &cpu_group);
  std::size_t i = 0;
  for (auto& b : model.named_buffers()) copy_(*b.second, saved[i++]);
  return r;
}

/// With SyncBatchNorm every rank must run the same number of forwards: refuses a test split
/// that gives some rank one batch more (it would wait for the others in an all_gather).
inline void check_equal_batches(const data::DataLoader& loader, dist::ProcessGroup& cpu_group) {
  Tensor n = Tensor::from_vector(std::vector<std::int64_t>{loader.num_batches(), -loader.num_batches()}, {2});
  cpu_group.all_reduce(n, dist::ReduceOp::max).wait();
  const std::vector<std::int64_t> v = n.to_vector<std::int64_t>();
  MGPU_CHECK(v[0] == -v[1], "train-mode evaluation: the ranks' test shares give ", -v[1], " to ",
             v[0], " batches of --batch-size; SyncBatchNorm needs the same number on every "
             "rank (choose another --batch-size or number of ranks)");
}

}  // namespace mgpu::lesson06
