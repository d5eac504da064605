// The programs' datasets and loaders (see data.h).
#include "mgpu/app/data.h"

#include "mgpu/dist/log.h"
#include "mgpu/error.h"

namespace mgpu::app {

namespace {

void check_usable(const data::Dataset& set, const std::string& flag) {
  MGPU_CHECK(set.size() > 0, set.describe(), " holds no samples: nothing to train or test on; ",
             "check the files in --data ", flag, " or try --data synthetic");
  MGPU_CHECK(shape_numel(set.sample_shape()) > 0, set.describe(), " has samples of shape ",
             shape_str(set.sample_shape()), " (no features): check the files in --data ", flag);
}

}  // namespace

Data open_data(const Options& opt) {
  Data d;
  d.train = data::open_dataset(opt.data, data::Split::train, opt.seed);
  d.test = data::open_dataset(opt.data, data::Split::test, opt.seed);
  check_usable(*d.train, opt.data);
  check_usable(*d.test, opt.data);
  MGPU_CHECK(opt.train_samples >= 0 && opt.train_samples <= d.train->size(), "--train-samples ",
             opt.train_samples, " is not in [0, ", d.train->size(), "] (0 uses all of ",
             d.train->describe(), ")");
  d.train_samples = opt.train_samples > 0 ? opt.train_samples : d.train->size();
  dist::log0("data: ", d.train->describe(), " (using ", d.train_samples, ")\n      ",
             d.test->describe());
  return d;
}

std::unique_ptr<data::DataLoader> train_loader(const Data& data, const Options& opt,
                                               const Device& device, bool drop_last,
                                               std::shared_ptr<const data::Sampler> sampler) {
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.seed = opt.seed;
  lo.device = device;
  lo.drop_last = drop_last;
  lo.pin_memory = device.is_cuda();  // PyTorch's advice for a GPU: an asynchronous copy
  if (!sampler) sampler = std::make_shared<data::RandomSampler>(data.train_samples, true, opt.seed);
  return std::make_unique<data::DataLoader>(data.train, lo, std::move(sampler));
}

namespace {

// Rank r of W takes r, r + W, ...: a split without padding (a DistributedSampler pads).
class StridedSampler : public data::Sampler {
 public:
  StridedSampler(std::int64_t n, int world, int rank) : n_(n), world_(world), rank_(rank) {}
  std::vector<std::int64_t> indices(std::int64_t) const override {
    std::vector<std::int64_t> out;
    for (std::int64_t i = rank_; i < n_; i += world_) out.push_back(i);
    return out;
  }

 private:
  std::int64_t n_;
  int world_, rank_;
};

}  // namespace

std::unique_ptr<data::DataLoader> test_loader(const Data& data, const Device& device,
                                              std::int64_t batch_size,
                                              dist::ProcessGroup* split_over) {
  data::DataLoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = false;
  lo.device = device;
  lo.pin_memory = device.is_cuda();
  std::shared_ptr<const data::Sampler> sampler;
  if (split_over)
    sampler = std::make_shared<StridedSampler>(data.test->size(), split_over->size(),
                                               split_over->rank());
  return std::make_unique<data::DataLoader>(data.test, lo, std::move(sampler));
}

}  // namespace mgpu::app
