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
  const std::int64_t per_chunk = (batch + num_devices - 1) / num_devices;
  for (std::int64_t begin = 0; begin < batch; begin += per_chunk)
    sizes.push_back(std::min(per_chunk, batch - begin));
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
  std::int64_t begin = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    chunks.push_back(counted_to(x.slice(begin, begin + sizes[i]), devices[i], phase, traffic));
    begin += sizes[i];
  }
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
  std::int64_t rows = 0;
  for (const Tensor& p : parts) rows += scalars ? 1 : p.size(0);
  Shape shape = scalars ? Shape{rows} : first.shape();
  shape[0] = rows;
  out = Tensor::empty(shape, first.dtype(), out_device);
  std::int64_t begin = 0;
  for (const Tensor& p : parts) {
    const Tensor src = scalars ? p.reshape({1}) : p;  // a scalar is a one-row view
    Tensor rows_of_p = out.slice(begin, begin + src.size(0));  // a view into `out`
    counted_copy(rows_of_p, src, phase, traffic);
    begin += src.size(0);
  }
  // TODO(task1) END
  return out;
}

}  // namespace mgpu::lesson02
