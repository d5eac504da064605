// Fashion-MNIST from IDX files, the synthetic dataset, and the --data chooser.
#include "mgpu/data/dataset.h"

#include <filesystem>
#include <sstream>

#include "mgpu/data/idx.h"
#include "mgpu/error.h"
#include "mgpu/rng.h"

namespace mgpu::data {

namespace fs = std::filesystem;

const std::array<const char*, 10> FashionMNIST::kClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

namespace {

const char* kInstallHint =
    "install it with `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or pass "
    "--data DIR (a folder with the IDX files) or --data synthetic";

/// `dir/name` if it exists, else `dir/name.gz`; throws naming both when neither does.
std::string find_idx(const std::string& dir, const std::string& name) {
  const fs::path plain = fs::path(dir) / name;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::exists(plain)) return plain.string();
  if (fs::exists(gz)) return gz.string();
  MGPU_FAIL("Fashion-MNIST: neither ", plain.string(), " nor ", gz.string(), " exists; ",
            kInstallHint);
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& dir, Split split) : path_(dir), split_(split) {
  MGPU_CHECK(fs::is_directory(dir), "Fashion-MNIST: folder ", dir, " not found; ", kInstallHint);
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  MGPU_CHECK(images.dims.size() == 3, "Fashion-MNIST: ", images_path, " has ", images.dims.size(),
             " dimensions, expected 3 (count, rows, columns)");
  MGPU_CHECK(labels.dims.size() == 1, "Fashion-MNIST: ", labels_path, " has ", labels.dims.size(),
             " dimensions, expected 1 (count)");
  MGPU_CHECK(images.dims[0] == labels.dims[0], "Fashion-MNIST: ", images_path, " holds ",
             images.dims[0], " images but ", labels_path, " holds ", labels.dims[0], " labels");
  for (std::uint8_t l : labels.values)
    MGPU_CHECK(l < 10, "Fashion-MNIST: ", labels_path, " contains label ", int{l},
               ", outside the 10 classes 0..9");
  // An empty file or 0x0 images would train nothing and still report a loss: refuse them.
  MGPU_CHECK(images.dims[0] > 0, "Fashion-MNIST: ", images_path, " holds no images; ",
             "the file is damaged or empty: reinstall the data or pass --data synthetic");
  MGPU_CHECK(images.dims[1] > 0 && images.dims[2] > 0, "Fashion-MNIST: ", images_path,
             " holds images of ", images.dims[1], "x", images.dims[2],
             " pixels; the file is damaged: reinstall the data or pass --data synthetic");
  count_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  pixels_ = std::move(images.values);
  labels_ = std::move(labels.values);
}

std::int64_t FashionMNIST::get(std::int64_t i, float* features) const {
  MGPU_CHECK(i >= 0 && i < count_, "FashionMNIST::get: index ", i, " outside [0, ", count_, ")");
  const std::int64_t n = rows_ * cols_;
  const std::uint8_t* px = pixels_.data() + i * n;
  // (pixel / 255 - mean) / std, folded into one multiply-add per pixel.
  const float scale = 1.0f / (255.0f * kStd), shift = -kMean / kStd;
  for (std::int64_t j = 0; j < n; ++j) features[j] = static_cast<float>(px[j]) * scale + shift;
  return labels_[static_cast<std::size_t>(i)];
}

std::string FashionMNIST::describe() const {
  std::ostringstream os;
  os << "Fashion-MNIST " << (split_ == Split::train ? "train" : "test") << " (" << count_
     << " images " << rows_ << "x" << cols_ << ") from " << path_;
  return os.str();
}

SyntheticDataset::SyntheticDataset(std::int64_t size, Shape sample_shape,
                                   std::int64_t num_classes, std::uint64_t seed, Split split,
                                   float noise)
    : size_(size),
      shape_(std::move(sample_shape)),
      classes_(num_classes),
      sample_seed_(mix_seed(seed, split == Split::train ? 1 : 2)),
      label_seed_(mix_seed(seed, split == Split::train ? 3 : 4)),
      noise_(noise),
      split_(split) {
  MGPU_CHECK(size_ >= 0 && classes_ >= 2, "SyntheticDataset: size ", size_, " and ", classes_,
             " classes (need size >= 0 and at least 2 classes)");
  const std::int64_t d = shape_numel(shape_);
  prototypes_.resize(static_cast<std::size_t>(classes_ * d));
  const std::uint64_t proto_seed = mix_seed(seed, 0);  // shared by both splits
  for (std::int64_t k = 0; k < classes_ * d; ++k)
    prototypes_[static_cast<std::size_t>(k)] =
        2.0f * random_uniform(proto_seed, static_cast<std::uint64_t>(k)) - 1.0f;
}

std::int64_t SyntheticDataset::get(std::int64_t i, float* features) const {
  MGPU_CHECK(i >= 0 && i < size_, "SyntheticDataset::get: index ", i, " outside [0, ", size_, ")");
  const std::int64_t label =
      static_cast<std::int64_t>(random_u32(label_seed_, static_cast<std::uint64_t>(i)) %
                                static_cast<std::uint32_t>(classes_));
  const std::int64_t d = shape_numel(shape_);
  const float* proto = prototypes_.data() + label * d;
  for (std::int64_t j = 0; j < d; ++j) {
    const float u = random_uniform(sample_seed_, static_cast<std::uint64_t>(i * d + j));
    features[j] = proto[j] + noise_ * (2.0f * u - 1.0f);
  }
  return label;
}

std::string SyntheticDataset::describe() const {
  std::ostringstream os;
  os << "synthetic " << (split_ == Split::train ? "train" : "test") << " (" << size_
     << " samples of " << shape_str(shape_) << ", " << classes_ << " classes)";
  return os.str();
}

std::shared_ptr<Dataset> open_dataset(const std::string& data, Split split, std::uint64_t seed) {
  if (data == "synthetic")
    return std::make_shared<SyntheticDataset>(split == Split::train ? 60000 : 10000,
                                              Shape{1, 28, 28}, 10, seed, split);
  return std::make_shared<FashionMNIST>(data.empty() ? FashionMNIST::kDefaultDir : data, split);
}

void load_range(const Dataset& ds, std::int64_t begin, std::int64_t end, Tensor& inputs,
                Tensor& labels) {
  MGPU_CHECK(begin >= 0 && begin <= end && end <= ds.size(), "load_range: [", begin, ", ", end,
             ") is not inside the ", ds.size(), " samples of ", ds.describe());
  Shape shape = ds.sample_shape();
  const std::int64_t d = shape_numel(shape);
  shape.insert(shape.begin(), end - begin);
  inputs = Tensor::empty(shape, DType::f32);
  labels = Tensor::empty({end - begin}, DType::i64);
  float* x = inputs.data<float>();
  std::int64_t* y = labels.data<std::int64_t>();
  for (std::int64_t i = begin; i < end; ++i) y[i - begin] = ds.get(i, x + (i - begin) * d);
}

}  // namespace mgpu::data
