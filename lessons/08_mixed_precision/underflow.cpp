// underflow: how many gradient elements fp16 cannot hold, measured on the course's models.
//
// Trains the MLP or the CNN in fp32 (SGD, momentum 0.9, as lesson 01) and, at the steps
// given by --at, backpropagates layer by layer while it keeps every gradient: the gradient
// arriving at each Linear/Conv2d (what the autocast policy casts to 16 bits before the
// GEMMs) and each weight gradient (what PyTorch's autocast computes in 16 bits). For each it
// counts the non-zero elements that fp16 flushes to zero (|g| <= 2^-25) and their share of
// the tensor's sum of |g| (small elements carry little of a gradient), those it keeps only
// as subnormals (|g| < 2^-14, fewer significant bits), and, multiplied by the loss scale, how
// many still flush and how many overflow (|g * S| >= 65520).
//
//   build/solutions/08_mixed_precision/underflow --model mlp
//   build/solutions/08_mixed_precision/underflow --model cnn --at 0 --at 300 --scale 65536
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/flags.h"
#include "mgpu/data/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

namespace {

using mgpu::DType;
using mgpu::Tensor;
namespace nn = mgpu::nn;
namespace data = mgpu::data;

struct Options {
  std::string model = "mlp";
  std::string data = data::FashionMNIST::kDefaultDir;
  std::int64_t batch_size = 64;
  double lr = 0.01;
  std::vector<std::int64_t> at;
  double scale = 65536.0;
  std::uint64_t seed = 0;
};

/// What fp16 does to one tensor's elements, unscaled and scaled.
struct Counts {
  std::int64_t total = 0, nonzero = 0;
  std::int64_t flushed = 0, subnormal = 0;                  // fp16, unscaled
  std::int64_t flushed_scaled = 0, overflow_scaled = 0;     // fp16, times the loss scale
  double max_abs = 0;
  double sum_abs = 0, flushed_sum_abs = 0;  // how much of the gradient's size is flushed
  void add(const Counts& o) {
    total += o.total, nonzero += o.nonzero, flushed += o.flushed, subnormal += o.subnormal;
    flushed_scaled += o.flushed_scaled, overflow_scaled += o.overflow_scaled;
    max_abs = std::max(max_abs, o.max_abs);
    sum_abs += o.sum_abs, flushed_sum_abs += o.flushed_sum_abs;
  }
};

// log2 bins of |g| for the histogram: [2^(2k - 2), 2^(2k)) for k = kLow..kHigh.
constexpr int kLow = -22, kHigh = 1;

Counts count(const Tensor& g, double scale, std::vector<std::int64_t>& histogram) {
  const std::vector<float> v = g.to_vector<float>();
  Counts c;
  c.total = static_cast<std::int64_t>(v.size());
  for (float x : v) {
    const float a = std::fabs(x);
    if (a == 0.f) continue;
    ++c.nonzero;
    c.max_abs = std::max(c.max_abs, static_cast<double>(a));
    c.sum_abs += a;
    const float h = mgpu::half_to_float(mgpu::float_to_half(a));
    if (h == 0.f) ++c.flushed, c.flushed_sum_abs += a;
    else if (h < std::ldexp(1.f, -14)) ++c.subnormal;
    const float hs = mgpu::half_to_float(mgpu::float_to_half(static_cast<float>(a * scale)));
    if (hs == 0.f) ++c.flushed_scaled;
    if (std::isinf(hs)) ++c.overflow_scaled;
    const int k = std::max(kLow, std::min(kHigh, static_cast<int>(std::floor(std::log2(a) / 2)) + 1));
    ++histogram[static_cast<std::size_t>(k - kLow)];
  }
  return c;
}

double pct(std::int64_t part, std::int64_t whole) { return whole ? 100.0 * part / whole : 0.0; }

void print_row(const std::string& what, const Counts& c) {
  const double lost = c.sum_abs > 0 ? 100.0 * c.flushed_sum_abs / c.sum_abs : 0.0;
  std::printf("  %-34s %9lld %9.2e %8.2f%% %8.4f%% %8.2f%% %8.2f%% %8.2f%%\n", what.c_str(),
              static_cast<long long>(c.nonzero), c.max_abs, pct(c.flushed, c.nonzero), lost,
              pct(c.subnormal, c.nonzero), pct(c.flushed_scaled, c.nonzero),
              pct(c.overflow_scaled, c.nonzero));
}

bool is_gemm_layer(const std::string& describe) {
  return describe.rfind("Linear", 0) == 0 || describe.rfind("Conv2d", 0) == 0;
}

// One forward and a layer-by-layer backward of `model` on (x, y), counting every gradient.
void measure(nn::Sequential& model, const Tensor& x, const Tensor& y, std::int64_t step,
             double scale) {
  nn::CrossEntropyLoss loss_fn;
  const double loss = loss_fn.forward(model.forward(x), y).item();
  std::printf("\nstep %lld, loss %.4f: share of the non-zero fp32 gradient elements that fp16\n"
              "flushes to zero (and their share of sum |g|) / keeps only as a subnormal, and\n"
              "with the loss scale %.0f\n",
              static_cast<long long>(step), loss, scale);
  std::printf("  %-34s %9s %9s %9s %9s %9s %9s %9s\n", "gradient", "non-zero", "max |g|", "zero",
              "zero |g|", "subnorm", "zero xS", "inf xS");
  std::vector<std::int64_t> histogram(kHigh - kLow + 1, 0), ignore(kHigh - kLow + 1, 0);
  Counts into_gemms, weights;
  Tensor g = loss_fn.backward();
  for (std::size_t i = model.size(); i-- > 0;) {
    nn::Module& layer = model[i];
    const std::string name = std::to_string(i) + "." + layer.describe().substr(0, 6);
    if (is_gemm_layer(layer.describe())) {
      const Counts c = count(g, scale, histogram);
      into_gemms.add(c);
      print_row("d/d out of " + name, c);
    }
    g = layer.backward(g);
    if (is_gemm_layer(layer.describe())) {
      const Counts w = count(layer.parameters()[0]->grad, scale, ignore);
      weights.add(w);
      print_row("d/d weight of " + name, w);
    }
  }
  print_row("all gradients into GEMMs", into_gemms);
  print_row("all weight gradients", weights);
  std::printf("  histogram of |g| into the GEMMs (fp16 keeps >= 2^-24; normal >= 2^-14):\n");
  for (int k = kLow; k <= kHigh; ++k) {
    const double share = pct(histogram[static_cast<std::size_t>(k - kLow)], into_gemms.nonzero);
    std::printf("    [2^%3d, 2^%3d) %6.2f%% %s%s\n", 2 * k - 2, 2 * k, share,
                std::string(static_cast<std::size_t>(share / 2 + 0.5), '#').c_str(),
                2 * k - 2 == -24 ? "  <- fp16's smallest subnormal" :
                2 * k - 2 == -14 ? "  <- fp16's smallest normal" : "");
  }
}

int run(const Options& opt) {
  if (opt.at.empty()) MGPU_FAIL("--at: give at least one step to measure");
  std::int64_t last = 0;
  for (std::int64_t s : opt.at) last = std::max(last, s);
  std::shared_ptr<const data::Dataset> train;
  if (opt.data == "synthetic") {
    train = std::make_shared<data::SyntheticDataset>(60000);
  } else {
    train = std::make_shared<data::FashionMNIST>(opt.data, data::Split::train);
  }
  std::printf("%s; model %s, batch %lld, SGD lr %g momentum 0.9, fp32 training\n",
              train->describe().c_str(), opt.model.c_str(), static_cast<long long>(opt.batch_size),
              opt.lr);
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model);
  mgpu::optim::SGDOptions so;
  so.lr = opt.lr;
  so.momentum = 0.9;
  mgpu::optim::SGD sgd(model->parameters(), so);
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.seed = opt.seed;
  lo.drop_last = true;
  data::DataLoader loader(train, lo);
  std::int64_t step = 0, epoch = 0;
  loader.start_epoch(epoch);
  while (step <= last) {
    data::Batch b;
    if (!loader.next(b)) {
      loader.start_epoch(++epoch);
      continue;
    }
    // Step 1) forward and backward: measured where asked, else as usual.
    sgd.zero_grad();
    bool measured = false;
    for (std::int64_t s : opt.at) measured = measured || s == step;
    if (measured) {
      measure(*model, b.inputs, b.labels, step, opt.scale);
    } else {
      nn::CrossEntropyLoss loss_fn;
      loss_fn.forward(model->forward(b.inputs), b.labels);
      model->backward(loss_fn.backward());
    }
    // Step 2) the fp32 update.
    sgd.step();
    ++step;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"underflow: the share of gradient elements fp16 flushes to zero, with and "
               "without a loss scale, on lesson 01's models trained in fp32"};
  app.add_option("--model", opt.model, "mlp or cnn")->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--data", opt.data, "Fashion-MNIST folder, or 'synthetic'")->capture_default_str();
  app.add_option("--batch-size", opt.batch_size, "samples per step")->capture_default_str()
      ->check(mgpu::app::positive_integer());
  app.add_option("--lr", opt.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--at", opt.at, "training steps at which to measure (repeatable; default 0 and 900)");
  app.add_option("--scale", opt.scale, "the loss scale to compare with")->capture_default_str()
      ->check(mgpu::app::positive_real());
  app.add_option("--seed", opt.seed, "initialisation and shuffle seed")->capture_default_str();
  MGPU_PARSE_FLAGS(app, argc, argv);
  if (opt.at.empty()) opt.at = {0, 900};
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "underflow: error: %s\n", e.what());
    return 1;
  }
}
