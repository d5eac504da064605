/// @file app.h
/// @brief mgpu::app, what every lesson program shares: flags, data, clock, trace, metrics,
/// progress line, epoch and `final:` lines, evaluation (DESIGN.md §8). One include.
///
/// A program declares its flags, builds its data, model and optimizer, and writes its step
/// loop; a Run does the rest. The whole of a small training program:
///
///     #include "mgpu/app/app.h"
///     #include "mgpu/nn/all.h"
///     #include "mgpu/optim/sgd.h"
///     using namespace mgpu;
///
///     int train(const app::Options& opt) {
///       const Device device = Device::parse(opt.device);
///       app::Run run(opt, "my program: one device", {device});   // opens --metrics, --trace
///       const app::Data data = app::open_data(opt);               // --data, checked
///       auto loader = app::train_loader(data, opt, device);
///       auto test_loader = app::test_loader(data, device, 1000);
///       nn::manual_seed(opt.seed);
///       auto model = nn::make_model(opt.model, data.train->sample_shape());
///       model->to(device);
///       optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, opt.weight_decay});
///       nn::CrossEntropyLoss loss_fn;
///       for (int epoch = 0; epoch < opt.epochs; ++epoch) {
///         const double lr = app::learning_rate(opt, epoch);
///         optimizer.set_lr(lr);
///         loader->start_epoch(epoch);
///         run.start_epoch(epoch, lr, *loader);
///         data::Batch batch;
///         while (run.next_batch(batch)) {                          // Step 1) a batch
///           optimizer.zero_grad();
///           const Tensor logits = model->forward(batch.inputs);    // Step 2) forward
///           const double loss = loss_fn.forward(logits, batch.labels).item();
///           model->backward(loss_fn.backward());                   // Step 3) backward
///           optimizer.step();                                      // Step 4) update
///           run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
///         }
///         run.end_training();
///         run.end_epoch(app::evaluate(*model, *test_loader));
///       }
///       return run.finish();                                       // trace, final: line
///     }
///
///     int main(int argc, char** argv) {
///       app::Options opt;                                          // defaults: mlp, 10 epochs...
///       CLI::App cli{"My program: train a model on Fashion-MNIST."};
///       app::add_flags(cli, opt, {{"mlp", "cnn"}});
///       CLI11_PARSE(cli, argc, argv);
///       return app::run_main([&] { return train(opt); });
///     }
///
/// A multi-rank program starts with app::init_ranks (its device, process group and a CPU
/// group), passes them to Run and a CPU group to evaluate (sums over ranks, one trace), and
/// wraps main's body in app::run_distributed instead. A comm hook or any other thread can
/// add spans with run.trace().span(track, name, begin_s, end_s, args), times taken with
/// app::now_s().
#pragma once

#include "mgpu/app/checkpoints.h"
#include "mgpu/app/clock.h"
#include "mgpu/app/data.h"
#include "mgpu/app/evaluate.h"
#include "mgpu/app/flags.h"
#include "mgpu/app/progress.h"
#include "mgpu/app/ranks.h"
#include "mgpu/app/report.h"
#include "mgpu/app/run.h"
#include "mgpu/app/trace.h"
#include "mgpu/app/traced.h"
