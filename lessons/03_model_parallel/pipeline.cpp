// The pipeline runner: one worker thread per stage runs its column of the schedule.
// Activations flow down the stages and gradients flow back up through mailboxes; a
// worker blocks until its input is posted, so the wall-clock timeline shows where the
// schedule makes a stage wait.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "mgpu/allocator.h"
#include "mgpu/app/clock.h"
#include "mgpu/stream.h"
#include "pipeline.h"

namespace mgpu::lesson03 {
namespace {

// Microseconds on the programs' one clock (app::now_s), so spans go into their trace as they are.
double now_us() { return app::now_s() * 1e6; }

// Thrown in a worker that stops because another worker failed (not an error of its own).
struct Aborted {};

// One slot per micro-batch: a neighbour stage posts a tensor, this stage takes it.
class Mailbox {
 public:
  explicit Mailbox(int slots) : items_(static_cast<std::size_t>(slots)) {}

  void post(int m, Tensor t) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_[m] = std::move(t);
    ready_.notify_all();
  }

  Tensor take(int m, double timeout_s, const std::atomic<bool>& abort, const char* what, int stage) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool arrived = ready_.wait_for(
        lock, std::chrono::duration<double>(timeout_s),
        [&] { return items_[m].defined() || abort.load(); });
    if (abort.load()) throw Aborted{};
    MGPU_CHECK(arrived, "Pipeline: stage ", stage, " waited ", timeout_s, " s for the ", what,
               " of micro-batch ", m, ", which never came: the schedule makes a stage wait for "
               "work that is ordered after it (check_schedule says which)");
    Tensor t = std::move(items_[m]);
    items_[m] = Tensor();
    return t;
  }

  void wake() {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Tensor> items_;
};

// The most micro-batches whose contexts one layer of the stage holds now.
int live_contexts(const Stage& stage) {
  std::size_t most = 0;
  for (const auto& layer : stage.layers) most = std::max(most, layer->saved_forwards());
  return static_cast<int>(most);
}

void clear_all(std::vector<Stage>& stages) {
  for (Stage& s : stages)
    for (auto& layer : s.layers) layer->clear_saved();
}

}  // namespace

double StepStats::bubble_fraction() const {
  if (busy_us.empty() || span_us <= 0) return 0;
  double idle = 0;
  for (double v : idle_us) idle += v;
  return idle / (span_us * static_cast<double>(busy_us.size()));
}

Pipeline::Pipeline(std::vector<Stage> stages) : stages_(std::move(stages)) {
  MGPU_CHECK(!stages_.empty(), "Pipeline: no stages");
}

Tensor Pipeline::forward(const Tensor& x) { return forward_through(stages_, x); }

StepStats Pipeline::train_step(const Tensor& x, const Tensor& labels, const Schedule& s) {
  const int K = static_cast<int>(stages_.size());
  MGPU_CHECK(s.num_stages == K, "Pipeline::train_step: schedule '", s.name, "' is for ",
             s.num_stages, " stages, the pipeline has ", K);
  check_schedule(s);
  check_defined("Pipeline::train_step", x, "x");
  check_defined("Pipeline::train_step", labels, "labels");
  MGPU_CHECK(x.ndim() >= 1 && labels.ndim() == 1 && labels.size(0) == x.size(0),
             "Pipeline::train_step: inputs ", x.str(), " and labels ", labels.str(),
             " must have the same number of rows");
  const int M = s.num_micro;
  const std::int64_t batch = x.size(0);
  const std::vector<std::int64_t> sizes = micro_batch_sizes(batch, M);
  const Device& first = stages_.front().device;
  const Device& last = stages_.back().device;

  // Step 1) gradients start at zero once per step; every micro-batch adds to them.
  for (Stage& st : stages_)
    for (auto& layer : st.layers) layer->zero_grad();

  // Step 2) cut the batch: inputs wait at stage 0, labels at the last stage.
  std::deque<Mailbox> inputs, grads;  // per stage: activations in, gradients in
  for (int k = 0; k < K; ++k) {
    inputs.emplace_back(M);
    grads.emplace_back(M);
  }
  std::vector<Tensor> micro_labels(static_cast<std::size_t>(M)), logits(static_cast<std::size_t>(M));
  std::vector<double> losses(static_cast<std::size_t>(M), 0.0);
  std::int64_t offset = 0;
  for (int m = 0; m < M; ++m) {
    inputs[0].post(m, x.slice(offset, offset + sizes[m]).to(first));
    micro_labels[m] = labels.slice(offset, offset + sizes[m]).to(last);
    offset += sizes[m];
  }

  // Step 3) what each stage's device holds before the first forward: the step's peak
  // above it is the activations, gradients and copies in flight.
  std::vector<std::size_t> held_before(static_cast<std::size_t>(K));
  for (int k = 0; k < K; ++k) reset_peak_memory(stages_[k].device);
  for (int k = 0; k < K; ++k) held_before[k] = memory_stats(stages_[k].device).allocated;

  // Step 4) one worker per stage runs its column of the schedule.
  std::atomic<bool> abort{false};
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(K));
  std::vector<std::vector<OpTiming>> timings(static_cast<std::size_t>(K));
  std::vector<int> peak_live(static_cast<std::size_t>(K), 0);
  auto worker = [&](int k) {
    Stage& stage = stages_[k];
    try {
      DeviceGuard device_guard(stage.device);
      // Sends go on the receiver's communication stream, so a copy never waits for the
      // receiver's compute stream (on the CPU these guards do nothing).
      std::optional<StreamGuard> to_next, to_prev;
      if (k + 1 < K && stages_[k + 1].device != stage.device) to_next.emplace(Stream::comm(stages_[k + 1].device));
      if (k > 0 && stages_[k - 1].device != stage.device) to_prev.emplace(Stream::comm(stages_[k - 1].device));
      const Stream compute = Stream::current(stage.device);
      for (const PipeOp& op : s.stage_ops(k)) {
        const int m = op.micro;
        double start = 0;
        Mailbox* send_to = nullptr;  // where this op's output goes, if anywhere
        Tensor sent;
        if (op.pass == Pass::forward) {
          const Tensor in = inputs[k].take(m, timeout_s_, abort, "activation", k);
          start = now_us();
          Tensor out;
          {
            nn::ContextScope scope(m);  // this micro-batch's contexts, for its backward
            out = stage.forward(in);
          }
          peak_live[k] = std::max(peak_live[k], live_contexts(stage));
          if (k + 1 < K) {
            send_to = &inputs[k + 1];
            sent = out.to(stages_[k + 1].device);  // copy_ waits for `out`
          } else {
            logits[m] = out;
          }
        } else {
          Tensor g;
          if (k == K - 1) {
            start = now_us();
            MicroLoss ml = micro_batch_loss(logits[m], micro_labels[m], batch);
            losses[m] = ml.weighted_loss;
            g = ml.grad;
            logits[m] = Tensor();
          } else {
            g = grads[k].take(m, timeout_s_, abort, "gradient", k);
            start = now_us();
          }
          Tensor g_in;
          {
            nn::ContextScope scope(m);  // takes micro-batch m's contexts, whatever ran since
            g_in = stage.backward(g);
          }
          if (k > 0) {
            send_to = &grads[k - 1];
            sent = g_in.to(stages_[k - 1].device);
          }
        }
        compute.synchronize();  // the op is really done: its time is the device's time
        timings[k].push_back({k, op, start, now_us()});
        // Posted after the op's end is taken, so the receiver cannot start before it.
        if (send_to) send_to->post(m, std::move(sent));
      }
    } catch (const Aborted&) {
      // another stage failed first; its error is the one reported
    } catch (...) {
      errors[k] = std::current_exception();
      abort = true;
      for (Mailbox& box : inputs) box.wake();
      for (Mailbox& box : grads) box.wake();
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < K; ++k) threads.emplace_back(worker, k);
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < K; ++k) {
    if (!errors[k]) continue;
    clear_all(stages_);  // forwards that never got their backward
    try {
      std::rethrow_exception(errors[k]);
    } catch (const std::exception& e) {
      MGPU_FAIL("Pipeline: stage ", k, " on ", stages_[k].device.str(), " failed: ", e.what());
    }
  }

  // Step 5) what the step measured.
  StepStats stats;
  stats.peak_live_contexts = peak_live;
  for (int k = 0; k < K; ++k)
    stats.peak_step_bytes.push_back(static_cast<double>(
        memory_stats(stages_[k].device).peak_allocated - held_before[k]));
  double begin = 0, end = 0;
  bool any = false;
  for (const auto& column : timings)
    for (const OpTiming& t : column) {
      begin = any ? std::min(begin, t.start_us) : t.start_us;
      end = any ? std::max(end, t.end_us) : t.end_us;
      any = true;
    }
  stats.span_us = end - begin;
  for (int k = 0; k < K; ++k) {
    double busy = 0;
    for (OpTiming t : timings[k]) {
      t.start_us -= begin;
      t.end_us -= begin;
      busy += t.end_us - t.start_us;
      stats.ops.push_back(t);
    }
    stats.busy_us.push_back(busy);
    stats.idle_us.push_back(std::max(0.0, stats.span_us - busy));
  }
  for (double l : losses) stats.loss += l;
  return stats;
}

}  // namespace mgpu::lesson03
