// Task 1: split a batch along dimension 0 across the devices (scatter), and its inverse
// (gather). PyTorch: torch.nn.parallel.scatter / gather, built on Tensor.chunk.
#include "data_parallel.h"

#include <algorithm>

#include "mgpu/copy.h"

namespace mgpu::lesson02 {

std::vector<std::int64_t> chunk_sizes(std::int64_t batch, int num_devices) {
  MGPU_CHECK(num_devices >= 1, "chunk_sizes: need at least one device, got ", num_devices);
  MGPU_CHECK(batch >= 1, "chunk_sizes: the batch has ", batch,
             " rows; DataParallel splits the total batch across the devices, so it needs at "
             "least one row");
  std::vector<std::int64_t> sizes;
  // What you have: integer arithmetic; sizes.push_back; std::min (<algorithm>).
  // TODO(task1) BEGIN: the chunk sizes of chapter §2, as Tensor.chunk cuts them, in chunk
  // order. Invariants: the sizes add up to batch, each is at least 1, and there are never
  // more chunks than devices (there may be fewer). Stuck: tools/hint 02 1 (about 6 lines).
  MGPU_FAIL("TODO(task1): chunk_sizes is not written yet (lessons/02_data_parallel/scatter_gather.cpp)");
  // TODO(task1) END
  return sizes;
}

std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, Traffic* traffic,
                            Phase phase) {
  check_defined("scatter", x, "x");
  MGPU_CHECK(x.ndim() >= 1, "scatter: ", x.str(),
             " has no dimension 0 to split; the batch dimension comes first");
  MGPU_CHECK(!devices.empty(), "scatter: no devices given");
  const std::vector<std::int64_t> sizes =
      chunk_sizes(x.size(0), static_cast<int>(devices.size()));
  std::vector<Tensor> chunks;
  // What you have: counted_to(t, device, phase, traffic) -> t on `device`, copied (and
  // counted) only when it is elsewhere; sizes (from chunk_sizes); x.slice(begin, end) -> a
  // view of rows [begin, end).
  // TODO(task1) BEGIN: one chunk per size (chapter §2): chunk i holds the next sizes[i] rows
  // of x and lives on devices[i]; together the chunks hold every row of x once, in order.
  // Only rows that change device are copied, and every copy is recorded in traffic under
  // phase. Stuck: tools/hint 02 1 (about 6 lines).
  (void)traffic;
  (void)phase;
  MGPU_FAIL("TODO(task1): scatter is not written yet (lessons/02_data_parallel/scatter_gather.cpp)");
  // TODO(task1) END
  return chunks;
}

Tensor gather(const std::vector<Tensor>& parts, const Device& out_device, Traffic* traffic,
              Phase phase) {
  MGPU_CHECK(!parts.empty(), "gather: nothing to gather");
  // Every part must agree on everything but its number of rows. Parts that are all 0-d
  // (one scalar per replica, e.g. each replica's loss) are gathered into a vector with one
  // value per replica, as PyTorch's Gather does (torch/nn/parallel/_functions.py).
  const Tensor& first = parts.front();
  check_defined("gather", first, "part 0");
  const bool scalars = first.ndim() == 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    check_defined("gather", p, "part");
    check_same_dtype("gather", first, p);
    MGPU_CHECK((p.ndim() == 0) == scalars, "gather: part ", i, " is ", p.str(), " but part 0 is ",
               first.str(), "; the parts are either all scalars (0-d) or all have a dimension 0");
    MGPU_CHECK(scalars || (p.ndim() == first.ndim() &&
                           Shape(p.shape().begin() + 1, p.shape().end()) ==
                               Shape(first.shape().begin() + 1, first.shape().end())),
               "gather: part ", i, " is ", p.str(), " but part 0 is ", first.str(),
               "; only dimension 0 may differ");
  }
  Tensor out;
  // What you have: counted_copy(dst, src, phase, traffic) copies into a view and counts it;
  // first (parts[0]) and scalars (true when every part is 0-d); t.reshape(shape);
  // t.slice(begin, end) -> a view of rows [begin, end); Tensor::empty(shape, dtype, device).
  // TODO(task1) BEGIN: `out`, a new tensor on out_device of first's dtype, holds the parts'
  // rows one after another along dimension 0 (chapter §2); a 0-d part counts as one row, so
  // scalars give a vector of parts.size() values. Every byte copied is recorded in traffic
  // under phase. Stuck: tools/hint 02 1 (about 12 lines).
  (void)out_device;
  (void)traffic;
  (void)phase;
  MGPU_FAIL("TODO(task1): gather is not written yet (lessons/02_data_parallel/scatter_gather.cpp); ",
            parts.size(), " part(s)");
  // TODO(task1) END
  return out;
}

}  // namespace mgpu::lesson02
