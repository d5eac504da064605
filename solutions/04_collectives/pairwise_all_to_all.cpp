// Lesson 04, task 5: all-to-all by hand, the pairwise exchange (mgpu/dist/all_to_all.h).
//
// In an all-to-all every rank holds a different piece for every rank: rank r's input is
// cut along dimension 0 into p pieces, piece q going to rank q, and its output collects
// rank q's piece for r at place q (c10d's all_to_all_single: DeepSpeed-Ulysses regroups
// attention heads with it, mixture-of-experts sends tokens to their experts). Nothing is
// added up: each piece travels once, straight from its sender to its receiver. The
// pairwise exchange orders those messages into rounds: rank r keeps its own piece (a
// local copy), and in round k = 1 .. p-1 it sends to rank r+k and receives from rank r-k
// (modulo p). Every round every rank sends one message and receives one, so no rank is a
// hot spot and every link is busy.
#include "mgpu/copy.h"
#include "mgpu/dist/all_to_all.h"
#include "mgpu/dist/work.h"

namespace mgpu::dist {

void pairwise_all_to_all(ProcessGroup& pg, const Tensor& output, const Tensor& input,
                         const std::vector<std::int64_t>& output_split_sizes,
                         const std::vector<std::int64_t>& input_split_sizes) {
  const int p = pg.size(), r = pg.rank();
  // What you have: all_to_all_pieces(output, input, output_split_sizes, input_split_sizes,
  // p) -> the checked cut in elements (send_counts[q], send_offsets[q]: input's piece for
  // rank q; recv_counts[q], recv_offsets[q]: output's piece from rank q), or the library's
  // mgpu::Error for bad input; t.view(offset, {count}) -> count elements of t from offset,
  // a view; copy_(dst, src) (mgpu/copy.h); pg.send(t, to) and pg.recv(t, from) -> a Work at
  // once; Work's wait(); p, r (above).
  // TODO(task5) BEGIN: chapter §3's pairwise all-to-all, blocking: on return output's piece q
  // holds rank q's piece for this rank, byte for byte, for equal pieces and for split sizes
  // (rows of dimension 0, as ProcessGroup::all_to_all; empty pieces and empty tensors
  // included). Bad input throws the same mgpu::Error as ProcessGroup::all_to_all, before any
  // message leaves. The own piece is a local copy, never a message; then p-1 rounds, and in
  // round k this rank sends exactly one message, to rank (r+k) mod p, and receives exactly
  // one, from rank (r-k) mod p, empty pieces included, through pg.send and pg.recv only.
  // Invariants: a message lands straight in its place in output (no scratch copy); no rank
  // waits for a message before both of its round's messages are posted (large pieces would
  // deadlock). Tested at p = 2, 3, 4. Stuck: tools/hint 04 5 (about 12 lines).
  const AllToAllPieces cut =
      all_to_all_pieces(output, input, output_split_sizes, input_split_sizes, p);
  auto piece_for = [&](int q) { return input.view(cut.send_offsets[q], {cut.send_counts[q]}); };
  auto piece_from = [&](int q) { return output.view(cut.recv_offsets[q], {cut.recv_counts[q]}); };
  Tensor own = piece_from(r);
  copy_(own, piece_for(r));
  for (int k = 1; k < p; ++k) {
    const int to = (r + k) % p, from = (r - k + p) % p;
    // Both in flight before either is waited for: rank `to` is busy sending to rank to+k,
    // and a send that waited for its receiver first would wait around the whole group.
    Work sent = pg.send(piece_for(to), to);
    Work received = pg.recv(piece_from(from), from);
    sent.wait();
    received.wait();
  }
  // TODO(task5) END
}

}  // namespace mgpu::dist
