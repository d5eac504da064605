// A GPT under DP x TP x PP: this rank's chunks of blocks, its ends of the model (the
// embeddings on the first virtual stage, the final LayerNorm and the vocabulary-split head
// on the last), and the step that runs its schedule with send/recv between the stages.
#include "mgpu/parallel/pp/gpt_pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "mgpu/allocator.h"
#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::pp {

namespace {

using Clock = std::chrono::steady_clock;

// The parts this rank holds, registered under the full model's names.
class Parts : public nn::Module {
 public:
  void add(const std::string& name, std::shared_ptr<nn::Module> child) {
    register_module(name, std::move(child));
  }
  Tensor forward(const Tensor&) override { MGPU_FAIL("GptPipeline's parts: call train_step"); }
  Tensor backward(const Tensor&) override { MGPU_FAIL("GptPipeline's parts: call train_step"); }
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("GptPipeline's parts are not cloned"); }
  std::string describe() const override { return "GptPipeline"; }
};

// What the last virtual stage keeps from a micro-batch's forward for its backward.
struct HeadSaved {
  Tensor hidden;  // ln_f's output [b·T, C]
  Tensor grad_r;  // dL/dlogits_r [b·T, Vp/TP], already divided by m
  std::int64_t batch = 0, time = 0;
};

}  // namespace

tp::ShardRange stage_blocks(std::int64_t n_layer, int stages, int stage) {
  MGPU_CHECK(stages >= 1 && n_layer >= stages, "the pipeline cuts ", n_layer, " block(s) into ",
             stages, " virtual stage(s) (PP x virtual): every stage needs a block");
  return tp::shard_range(n_layer, stages, stage);
}

struct GptPipeline::Impl {
  const grid::ProcessGrid* grid = nullptr;
  int p = 1, v = 1, m = 1, S = 1, rank = 0, tp = 1;
  std::int64_t vocab = 0, padded = 0, C = 0;
  tp::ShardRange rows;
  std::vector<std::vector<std::shared_ptr<nn::Module>>> chunks;  // [chunk] -> blocks
  std::vector<tp::ShardRange> chunk_ranges;
  std::shared_ptr<nn::Module> wte, wpe, ln_f, head;  // head: the table the head reads
  bool first = false, last = false;                  // holds virtual stage 0 / S - 1
  Parts parts;
  std::map<int, HeadSaved> head_saved;  // by micro-batch
  std::map<int, Tensor> local_mail;     // messages to this same rank, by tag

  dist::ProcessGroup& tp_group() const { return grid->group(grid::Axis::tp); }
  dist::ProcessGroup& dp_group() const { return grid->group(grid::Axis::dp); }
  dist::ProcessGroup& pp_group() const { return grid->group(grid::Axis::pp); }

  int tag(Pass pass, int micro, int dest_stage) const {
    return ((pass == Pass::forward ? 0 : 1) * m + micro) * S + dest_stage;
  }

  Tensor embed(const Tensor& ids) {
    const std::int64_t B = ids.size(0), T = ids.size(1);
    std::vector<std::int64_t> positions(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = t;
    Tensor x = wte->forward(ids);
    const Tensor pos = wpe->forward(Tensor::from_vector(positions, {T}, ids.device()));
    Tensor flat = x.reshape({B, T * C});
    add_rowwise_(flat, pos.reshape({T * C}));
    return x;
  }

  void embed_backward(const Tensor& dx) {
    const std::int64_t B = dx.size(0), T = dx.size(1);
    wpe->backward(sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
    wte->backward(dx);
  }

  // The head's forward on the last stage: the loss of one micro-batch (mean over its
  // tokens); keeps what the backward needs.
  double head_forward(int micro, const Tensor& x, const Tensor& targets) {
    const std::int64_t B = x.size(0), T = x.size(1);
    const Tensor hidden = ln_f->forward(x).reshape({B * T, C});
    const Tensor w_r = head_rows();
    const Tensor logits_r = matmul(hidden, w_r, false, true);
    HeadSaved saved{hidden, Tensor(), B, T};
    const double loss = tp::vocab_parallel_cross_entropy(logits_r, targets.reshape({B * T}), rows,
                                                         vocab, tp_group(), &saved.grad_r);
    scale_(saved.grad_r, 1.0 / m);  // the step's loss is the mean of the m micro-batches'
    head_saved[micro] = std::move(saved);
    return loss;
  }

  // The head's backward: its share of the tied table's gradient, then ln_f's.
  Tensor head_backward(int micro) {
    HeadSaved s = std::move(head_saved.at(micro));
    head_saved.erase(micro);
    const Tensor w_r = head_rows();
    Tensor d_hidden = matmul(s.grad_r, w_r);
    tp_group().all_reduce(d_hidden, dist::ReduceOp::sum).wait();  // the head is column-parallel
    Tensor& table = head->parameter("weight").value;
    Tensor head_grad = Tensor::zeros({padded, C}, table.dtype(), table.device());
    Tensor mine = head_grad.slice(rows.begin, rows.end);
    copy_(mine, matmul(s.grad_r, s.hidden, true, false));
    tp_group().all_reduce(head_grad, dist::ReduceOp::sum).wait();
    add_(head->parameter("weight").grad, head_grad.slice(0, vocab));
    return ln_f->backward(d_hidden.reshape({s.batch, s.time, C}));
  }

  // This rank's rows of the (padded) tied table, the padding rows zero.
  Tensor head_rows() {
    Tensor& table = head->parameter("weight").value;
    Tensor w_r = Tensor::zeros({rows.size(), C}, table.dtype(), table.device());
    const std::int64_t real_end = std::min(rows.end, vocab);
    if (real_end > rows.begin) {
      Tensor dst = w_r.slice(0, real_end - rows.begin);
      copy_(dst, table.slice(rows.begin, real_end));
    }
    return w_r;
  }
};

GptPipeline::GptPipeline(nn::GPT& full, const grid::ProcessGrid& grid, const PipelineOptions& options)
    : impl_(std::make_shared<Impl>()), options_(options) {
  Impl& I = *impl_;
  I.grid = &grid;
  I.p = grid.shape().pp;
  I.v = options.virtual_stages;
  I.m = options.micro_batches;
  I.S = I.p * I.v;
  I.rank = grid.coords().pp;
  I.tp = grid.shape().tp;
  MGPU_CHECK(I.v >= 1 && I.m >= 1, "GptPipeline: ", I.v, " virtual stage(s) and ", I.m,
             " micro-batch(es): need at least 1 of each");
  MGPU_CHECK(2 * I.m * I.S < 32767, "GptPipeline: ", I.m, " micro-batches through ", I.S,
             " virtual stages need more message tags than a send has (2·m·S < 32767)");
  order_ = schedule_order(options.schedule, I.p, I.v, I.m, I.rank);
  const nn::GPTConfig& cfg = full.config();
  I.vocab = cfg.vocab_size;
  I.C = cfg.n_embd;
  I.padded = tp::padded_vocab(I.vocab, I.tp);
  I.rows = tp::shard_range(I.padded, I.tp, grid.coords().tp);
  const auto& kids = full.children();  // wte, wpe, h.0 ... h.{L-1}, ln_f
  I.first = I.rank == 0;
  I.last = I.rank == I.p - 1;
  if (I.first) {
    I.wte = kids.front().second->clone();
    I.wpe = kids.at(1).second->clone();
    I.parts.add(kids.front().first, I.wte);
    I.parts.add(kids.at(1).first, I.wpe);
  }
  for (int c = 0; c < I.v; ++c) {
    const tp::ShardRange r = stage_blocks(cfg.n_layer, I.S, virtual_stage(I.p, I.rank, c));
    I.chunk_ranges.push_back(r);
    I.chunks.emplace_back();
    for (std::int64_t b = r.begin; b < r.end; ++b) {
      const auto& [name, block] = kids.at(static_cast<std::size_t>(2 + b));
      std::shared_ptr<nn::Module> mine;
      if (I.tp == 1)
        mine = block->clone();
      else
        mine = std::make_shared<tp::ParallelBlock>(static_cast<nn::Block&>(*block), grid.group(grid::Axis::tp));
      I.chunks.back().push_back(mine);
      I.parts.add(name, mine);
    }
  }
  if (I.last) {
    I.ln_f = kids.back().second->clone();
    I.parts.add(kids.back().first, I.ln_f);
    if (I.first) {
      I.head = I.wte;
    } else {
      I.head = kids.front().second->clone();  // the tied table's copy on the last stage
      I.parts.add("lm_head", I.head);
    }
  }
}

std::vector<std::pair<std::string, nn::Parameter*>> GptPipeline::named_parameters() {
  return impl_->parts.named_parameters();
}
std::vector<nn::Parameter*> GptPipeline::parameters() { return impl_->parts.parameters(); }
std::int64_t GptPipeline::num_parameters() { return impl_->parts.num_parameters(); }
std::vector<tp::ShardRange> GptPipeline::chunk_blocks() const { return impl_->chunk_ranges; }

PipelineStepReport GptPipeline::train_step(const Tensor& ids, const Tensor& targets) {
  Impl& I = *impl_;
  const grid::ProcessGrid& grid = *I.grid;
  MGPU_CHECK(ids.ndim() == 2 && ids.shape() == targets.shape() && ids.size(0) % I.m == 0,
             "GptPipeline::train_step: ids ", ids.str(), " and targets ", targets.str(),
             " must be [B, T] with B a multiple of the ", I.m, " micro-batches");
  const std::int64_t b = ids.size(0) / I.m, T = ids.size(1);
  const DType dtype = I.parts.parameters().front()->value.dtype();
  const Device device = ids.device();
  PipelineStepReport report;
  I.parts.zero_grad();
  reset_peak_memory(device);
  const std::size_t base = memory_stats(device).allocated;
  const std::int64_t collectives_before = grid.collectives_issued();
  dist::ProcessGroup& pp = I.pp_group();
  std::vector<std::pair<dist::Work, Tensor>> sends;  // kept alive until the step's end
  auto send = [&](const Tensor& t, int dest_stage, Pass pass, int micro) {
    const int peer = dest_stage % I.p, tag = I.tag(pass, micro, dest_stage);
    if (peer == I.rank) {
      I.local_mail[tag] = t;
      return;
    }
    sends.emplace_back(pp.send(t, peer, tag), t);
    report.messages += 1;
    report.message_bytes += static_cast<std::int64_t>(t.numel() * dtype_size(t.dtype()));
  };
  auto receive = [&](int my_stage, int from_stage, Pass pass, int micro) {
    const int peer = from_stage % I.p, tag = I.tag(pass, micro, my_stage);
    if (peer == I.rank) {
      auto it = I.local_mail.find(tag);
      MGPU_CHECK(it != I.local_mail.end(), "GptPipeline: rank ", I.rank, " waits for its own ",
                 pass == Pass::forward ? "activation" : "gradient", " of micro-batch ", micro,
                 " that it has not made yet (the schedule runs it too early)");
      Tensor t = it->second;
      I.local_mail.erase(it);
      return t;
    }
    Tensor t = Tensor::empty({b, T, I.C}, dtype, device);
    pp.recv(t, peer, tag).wait();
    return t;
  };
  const auto step_start = Clock::now();
  auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(t - step_start).count(); };
  double loss_sum = 0;
  for (const PipeOp& op : order_) {
    const int s = virtual_stage(I.p, I.rank, op.chunk);
    auto& blocks = I.chunks.at(static_cast<std::size_t>(op.chunk));
    nn::ContextScope scope(op.micro);
    Tensor x;
    Clock::time_point start;
    if (op.pass == Pass::forward) {
      if (s == 0) {
        start = Clock::now();
        x = I.embed(ids.slice(op.micro * b, (op.micro + 1) * b).clone());
      } else {
        x = receive(s, s - 1, Pass::forward, op.micro);
        start = Clock::now();
      }
      for (auto& blk : blocks) x = blk->forward(x);
      if (s == I.S - 1)
        loss_sum += I.head_forward(op.micro, x, targets.slice(op.micro * b, (op.micro + 1) * b).clone());
      report.ops.push_back({op, since(start), since(Clock::now())});
      if (s != I.S - 1) send(x, s + 1, Pass::forward, op.micro);
    } else {
      if (s == I.S - 1) {
        start = Clock::now();
        x = I.head_backward(op.micro);
      } else {
        x = receive(s, s + 1, Pass::backward, op.micro);
        start = Clock::now();
      }
      for (std::size_t l = blocks.size(); l-- > 0;) x = blocks[l]->backward(x);
      if (s == 0) I.embed_backward(x);
      report.ops.push_back({op, since(start), since(Clock::now())});
      if (s != 0) send(x, s - 1, Pass::backward, op.micro);
    }
  }
  for (auto& [work, t] : sends) work.wait();
  for (const OpTime& o : report.ops) report.busy_s += o.end_s - o.start_s;
  report.span_s = report.ops.empty() ? 0.0 : report.ops.back().end_s;
  // The tied table: the first stage's lookup gradient plus the last stage's head gradient,
  // the sum sent back, so both copies take the same update.
  if (I.p > 1 && (I.first || I.last)) {
    const int tied_tag = 32767;
    if (I.last) {
      Tensor& g = I.head->parameter("weight").grad;
      pp.send(g, 0, tied_tag).wait();
      pp.recv(g, 0, tied_tag).wait();
    } else {
      Tensor& g = I.wte->parameter("weight").grad;
      Tensor other = Tensor::empty(g.shape(), g.dtype(), g.device());
      pp.recv(other, I.p - 1, tied_tag).wait();
      add_(g, other);
      pp.send(g, I.p - 1, tied_tag).wait();
    }
    report.messages += 1;
    report.message_bytes +=
        static_cast<std::int64_t>(I.vocab * I.C * static_cast<std::int64_t>(dtype_size(dtype)));
  }
  // The loss lives on the last stage: one broadcast over the pipeline, then DP's mean.
  Tensor loss = Tensor::from_vector(std::vector<double>{loss_sum / I.m}, {1});
  if (I.p > 1) pp.broadcast(loss, I.p - 1).wait();
  const int D = grid.shape().dp;
  if (D > 1) {
    std::vector<std::string> names;
    for (const auto& [name, param] : I.parts.named_parameters()) names.push_back(name);
    tp::all_reduce_replicated_grads(I.parts, names, I.dp_group());  // one all-reduce
    for (nn::Parameter* param : I.parts.parameters()) scale_(param->grad, 1.0 / D);
    I.dp_group().all_reduce(loss, dist::ReduceOp::avg).wait();
  }
  report.loss = loss.to_vector<double>()[0];
  report.collectives = grid.collectives_issued() - collectives_before;
  report.peak_bytes = memory_stats(device).peak_allocated - base;
  return report;
}

}  // namespace mgpu::parallel::pp
