// Run: the bookkeeping around a training loop (see run.h).
#include "mgpu/app/run.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "mgpu/app/clock.h"
#include "mgpu/dist/log.h"
#include "mgpu/dist/runtime.h"
#include "mgpu/stream.h"

namespace mgpu::app {

Run::Run(const Options& opt, const std::string& title, std::vector<Device> devices,
         dist::ProcessGroup* group)
    : opt_(opt),
      devices_(std::move(devices)),
      group_(group),
      world_(group ? group->size() : 1),
      data_parallel_(world_),
      batch_line_due_(group != nullptr) {
  std::string mapping = describe_mapping(devices_);
  while (!mapping.empty() && mapping.back() == '\n') mapping.pop_back();
  dist::log0(title);
  if (world_ > 1) dist::log_all(mapping);
  else dist::log0(mapping);
  // Both files are created before any work, so a bad path costs nothing and a finished
  // run cannot lose its output to one.
  if (!opt.metrics.empty() && dist::rank() == 0) metrics_.open(opt.metrics);
  if (group_) group_->barrier().wait();  // one time origin for every rank's trace
  start_s_ = now_s();
  if (!opt.trace.empty()) trace_.open(opt.trace, start_s_);
}

Run::Run(const Options& opt, const std::string& title, const Ranks& ranks)
    : Run(opt, title, {ranks.device}, ranks.cpu_group.get()) {}

void Run::add_metric_fields(const MetricFields& fields) {
  extra_fields_.insert(extra_fields_.end(), fields.begin(), fields.end());
}

void Run::set_metric_field(const std::string& name, double value) {
  for (auto& field : extra_fields_)
    if (field.first == name) {
      field.second = value;
      return;
    }
  extra_fields_.emplace_back(name, value);
}

void Run::set_data_parallel_size(int ranks) {
  MGPU_CHECK(ranks >= 1 && world_ % ranks == 0, "Run::set_data_parallel_size: ", ranks,
             " data-parallel ranks do not divide the ", world_, " ranks of the run");
  data_parallel_ = ranks;
}

double Run::elapsed_s() const { return now_s() - start_s_; }

void Run::start_epoch(int epoch, double lr, data::DataLoader& loader) {
  const std::int64_t batches = loader.num_batches();
  MGPU_CHECK(batches > 0, "the training data gives no batch: ", loader.num_samples(),
             " samples per epoch on this rank and --batch-size ", loader.options().batch_size,
             loader.options().drop_last ? " with the last, smaller batch dropped" : "",
             "; use a --batch-size of at most the samples per epoch, or more --train-samples");
  loader_ = &loader;
  epoch_ = epoch;
  lr_ = lr;
  loss_sum_ = 0;
  correct_ = seen_ = steps_ = resumed_steps_ = resumed_seen_ = 0;
  planned_ = opt_.steps > 0 ? std::min(opt_.steps, batches) : batches;
  if (batch_line_due_) {
    dist::log0(batch_line(opt_.batch_size, data_parallel_, world_, loader.num_samples(), planned_,
                          batch_note_));
    batch_line_due_ = false;
  }
  progress_.start_epoch(epoch, opt_.epochs, planned_);
  for (const Device& d : devices_) synchronize(d);
  epoch_start_s_ = now_s();
}

void Run::resume_epoch(int epoch, double lr, data::DataLoader& loader, const EpochSums& sums) {
  start_epoch(epoch, lr, loader);
  MGPU_CHECK(sums.steps >= 0 && sums.steps <= planned_, "Run::resume_epoch: step ", sums.steps,
             " of an epoch of ", planned_, " steps");
  steps_ = sums.steps;
  loss_sum_ = sums.loss_sum;
  correct_ = sums.correct;
  seen_ = sums.seen;
  resumed_steps_ = sums.steps;  // done before the resume: not in this run's time
  resumed_seen_ = sums.seen;
}

Tensor Run::gather_epoch_sums(dist::ProcessGroup& group) const {
  const EpochSums s = epoch_sums();
  Tensor mine = Tensor::from_vector<double>({static_cast<double>(s.steps), s.loss_sum,
                                             static_cast<double>(s.correct),
                                             static_cast<double>(s.seen)}, {4});
  Tensor all = Tensor::empty({group.size(), 4}, DType::f64);
  group.all_gather(all, mine).wait();
  return all;
}

Run::EpochSums Run::epoch_sums_of(const Tensor& rows, int rank) {
  MGPU_CHECK(rows.ndim() == 2 && rows.size(1) == 4 && rank >= 0 && rank < rows.size(0),
             "Run::epoch_sums_of: expected a {ranks, 4} tensor with a row for rank ", rank,
             ", got ", rows.str());
  const std::vector<double> all = rows.to(DType::f64).to_vector<double>();
  const double* r = all.data() + 4 * rank;
  return {static_cast<std::int64_t>(r[0]), r[1], static_cast<std::int64_t>(r[2]),
          static_cast<std::int64_t>(r[3])};
}

bool Run::next_batch(data::Batch& batch) {
  MGPU_CHECK(loader_ != nullptr, "Run::next_batch: call start_epoch first");
  if (steps_ >= planned_) return false;
  const double begin = now_s();
  const bool more = loader_->next(batch);
  const double end = now_s();
  last_wait_s_ = end - begin;
  if (more) trace_.span(step_track_, "data wait", begin, end);
  return more;
}

void Run::step(double loss, std::int64_t samples, std::int64_t correct) {
  loss_sum_ += loss * static_cast<double>(samples);
  seen_ += samples;
  if (correct >= 0) correct_ += correct;
  else counts_correct_ = false;
  ++steps_;
  ++total_steps_;
  if (progress_.shown()) {
    const double elapsed = now_s() - epoch_start_s_;
    const double per_step = elapsed / static_cast<double>(steps_ - resumed_steps_);
    const std::int64_t left = (planned_ - steps_) + (opt_.epochs - epoch_ - 1) * planned_;
    progress_.update(steps_, loss_sum_ / static_cast<double>(seen_),
                     elapsed > 0 ? static_cast<double>((seen_ - resumed_seen_) * data_parallel_) / elapsed : 0.0,
                     per_step * static_cast<double>(left));
  }
}

void Run::end_training() {
  for (const Device& d : devices_) synchronize(d);
  training_end_s_ = now_s();
  epoch_time_s_ = training_end_s_ - epoch_start_s_;
  train_time_s_ += epoch_time_s_;
  progress_.clear();
}

void Run::end_epoch(const EvalResult& test) {
  trace_.span(step_track_, "evaluate", training_end_s_, now_s());  // since end_training()
  // The training numbers of every rank: sums first, means after.
  double loss_sum = loss_sum_, correct = static_cast<double>(correct_), seen = static_cast<double>(seen_);
  double timed = static_cast<double>(seen_ - resumed_seen_);  // trained in this run's time
  if (group_) {
    const std::vector<double> s = sum_over_ranks(*group_, {loss_sum, correct, seen, timed});
    loss_sum = s[0], correct = s[1], seen = s[2], timed = s[3];
  }
  EpochStats s;
  s.epoch = epoch_ + 1;
  s.epochs = opt_.epochs;
  s.lr = lr_;
  s.train_loss = seen > 0 ? loss_sum / seen : 0;
  s.has_train_acc = counts_correct_;
  s.train_acc = seen > 0 ? correct / seen : 0;
  s.test_loss = test.loss;
  s.test_acc = test.accuracy;
  s.samples_per_s = epoch_time_s_ > 0 ? timed / epoch_time_s_ : 0;
  const std::int64_t timed_steps = steps_ - resumed_steps_;
  s.step_ms = timed_steps ? 1e3 * epoch_time_s_ / static_cast<double>(timed_steps) : 0;
  s.data_wait_s = loader_ ? loader_->wait_seconds() : 0;
  s.world_size = world_;
  s.global_batch = opt_.batch_size * data_parallel_;
  s.time_s = elapsed_s();
  trained_samples_ += timed;
  last_train_loss_ = s.train_loss;
  last_test_acc_ = s.test_acc;
  dist::log0(epoch_line(s));
  metrics_.write(s, extra_fields_);
}

int Run::finish() {
  if (trace_.on()) {
    trace_.write(group_);
    dist::log0("trace: ", trace_.path(), " (open it in https://ui.perfetto.dev)");
  }
  dist::log0(final_line(last_test_acc_, last_train_loss_,
                        train_time_s_ > 0 ? trained_samples_ / train_time_s_ : 0.0, elapsed_s()));
  return 0;
}

int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

int run_distributed(int* argc, char*** argv, const std::function<int()>& body) {
  try {
    dist::Runtime runtime(argc, argv);
    try {
      return body();
    } catch (const std::exception& e) {
      // Every rank usually fails the same way (the same checks on the same flags and data):
      // then rank 0 says it once and all exit together, cleanly. One that fails alone must
      // not leave the others waiting in a collective: it ends the job.
      const std::string reason = std::string("error: ") + e.what();
      if (!dist::failing_alike_everywhere(reason)) dist::abort_job(reason);
      if (dist::is_main_rank()) std::fprintf(stderr, "%s\n", reason.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace mgpu::app
