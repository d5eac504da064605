/// @file dataset.h
/// @brief Datasets: Fashion-MNIST from IDX files, and a seeded synthetic one for tests.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::data {

/// Which half of a dataset.
enum class Split { train, test };

/// A list of labelled samples, read by index. get() must be safe to call from several
/// threads at once (the DataLoader's workers call it concurrently).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual std::int64_t size() const = 0;
  /// Shape of one sample, e.g. {1, 28, 28}.
  virtual Shape sample_shape() const = 0;
  /// Labels are 0 .. num_classes() - 1.
  virtual std::int64_t num_classes() const = 0;
  /// Writes sample i's features (shape_numel(sample_shape()) floats) and returns its label.
  virtual std::int64_t get(std::int64_t i, float* features) const = 0;
  /// One line, e.g. "Fashion-MNIST train (60000 images) from /usr/share/...".
  virtual std::string describe() const = 0;
};

/// Fashion-MNIST (Zalando): 28x28 grey images of clothes in 10 classes, 60000 for training
/// and 10000 for testing. Images are scaled to [0, 1] and normalised with the training
/// set's mean and standard deviation, so inputs are centred near 0 with spread near 1.
class FashionMNIST : public Dataset {
 public:
  /// Where Debian's dataset-fashion-mnist package puts the files.
  static constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
  static constexpr float kMean = 0.2860f;  ///< mean pixel of the training set, in [0, 1]
  static constexpr float kStd = 0.3530f;   ///< standard deviation of its pixels
  /// The names of labels 0..9.
  static const std::array<const char*, 10> kClassNames;

  /// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`. A missing folder
  /// or file throws an error that says how to install the data or choose other data.
  FashionMNIST(const std::string& dir, Split split);

  std::int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {1, rows_, cols_}; }
  std::int64_t num_classes() const override { return 10; }
  std::int64_t get(std::int64_t i, float* features) const override;
  std::string describe() const override;

 private:
  std::string path_;
  Split split_;
  std::int64_t count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<std::uint8_t> pixels_, labels_;
};

/// Generated, learnable data: each class has a fixed random prototype, and a sample is
/// its class's prototype plus uniform noise. Deterministic in (seed, split, index); the
/// train and test splits share prototypes and differ in their samples.
class SyntheticDataset : public Dataset {
 public:
  /// `size` samples of `sample_shape` in `num_classes` classes; `noise` is the half-width
  /// of the uniform noise added to the prototypes (whose values are in [-1, 1]).
  SyntheticDataset(std::int64_t size, Shape sample_shape = {1, 28, 28},
                   std::int64_t num_classes = 10, std::uint64_t seed = 0,
                   Split split = Split::train, float noise = 1.0f);

  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  std::int64_t num_classes() const override { return classes_; }
  std::int64_t get(std::int64_t i, float* features) const override;
  std::string describe() const override;

 private:
  std::int64_t size_;
  Shape shape_;
  std::int64_t classes_;
  std::uint64_t sample_seed_, label_seed_;
  float noise_;
  Split split_;
  std::vector<float> prototypes_;  // [classes, numel(shape)]
};

/// What the programs' --data flag names: "synthetic" (60000/10000 generated samples of
/// Fashion-MNIST's shape) or a folder with the Fashion-MNIST IDX files.
std::shared_ptr<Dataset> open_dataset(const std::string& data, Split split,
                                      std::uint64_t seed = 0);

/// All samples i in [begin, end) as host tensors: inputs f32 [n, sample_shape...], labels
/// i64 [n]. For tests and small evaluations; training goes through the DataLoader.
void load_range(const Dataset& ds, std::int64_t begin, std::int64_t end, Tensor& inputs,
                Tensor& labels);

}  // namespace mgpu::data
