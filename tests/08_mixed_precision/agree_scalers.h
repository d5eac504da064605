// Lesson 08's agreement checks of unscale_ (one process and mpirun): the reference's
// unscale_ (with the library's update rule, mptest::Task2Scaler) and amp::GradScaler's run
// the same script side by side; after every call both are in the same state, bit for bit.
#pragma once

#include <string>

#include "../common/agreement.h"
#include "mp_test_util.h"

namespace mptest {

/// A scaler whose per-optimizer state (stage, found_inf flags) a test can read.
template <typename Scaler>
class Seen : public Scaler {
 public:
  using Scaler::Scaler;
  /// "stage N: device=flag ..." for `opt`; "none" when it has no state yet.
  std::string state_of(const optim::Optimizer& opt) const {
    auto it = this->states_.find(&opt);
    if (it == this->states_.end()) return "none";
    std::string s = "stage " + std::to_string(static_cast<int>(it->second.stage)) + ":";
    for (const auto& [device, flag] : it->second.found_inf_per_device)
      s += " " + device + "=" + std::to_string(flag.item()) + " (" + flag.str() + ")";
    return s;
  }
};

/// One side of the comparison: a scaler and the Toy layer it scales.
template <typename Scaler>
struct Side {
  Seen<Scaler> scaler;
  Toy toy;
  Side(amp::GradScalerOptions o, dist::ProcessGroup* group, std::uint64_t seed)
      : scaler(o, group), toy(seed) {}
};

/// The reference's unscale_ beside the library's, on the same Toy layer and options.
struct UnscalePair {
  Side<Task2Scaler> ref;
  Side<amp::GradScaler> lib;
  explicit UnscalePair(amp::GradScalerOptions o = {}, dist::ProcessGroup* group = nullptr,
                       std::uint64_t seed = 1)
      : ref(o, group, seed), lib(o, group, seed) {}

  /// Runs `call` on both sides (scaler, toy) -> a printable result; both must return the
  /// same or both throw, and be left in the same state.
  template <typename Call>
  void both(const char* what, Call&& call) {
    INFO(what);
    const std::string r = attempt([&] { return call(ref.scaler, ref.toy); });
    const std::string l = attempt([&] { return call(lib.scaler, lib.toy); });
    CHECK(r == l);
    CHECK(ref.scaler.state_of(*ref.toy.sgd) == lib.scaler.state_of(*lib.toy.sgd));
    CHECK(ref.scaler.get_scale() == lib.scaler.get_scale());
    CHECK(ref.scaler.growth_tracker() == lib.scaler.growth_tracker());
    CHECK(ref.scaler.last_step_skipped() == lib.scaler.last_step_skipped());
    const auto rp = ref.toy.layer->parameters(), lp = lib.toy.layer->parameters();
    for (std::size_t i = 0; i < rp.size(); ++i) {
      CHECK_SAME_BITS(rp[i]->value, lp[i]->value);
      CHECK_SAME_BITS(rp[i]->grad, lp[i]->grad);
    }
  }

 private:
  template <typename Call>
  static std::string attempt(Call&& call) {
    try {
      return "returned " + call();
    } catch (const Error&) {
      return "threw";
    }
  }
};

/// Calls for UnscalePair::both.
inline std::string scale_one(amp::GradScaler& s, Toy&) {
  return s.scale(Tensor::full({}, 1.0)).str();
}
inline std::string unscale(amp::GradScaler& s, Toy& t) {
  s.unscale_(*t.sgd);
  return "";
}
inline std::string step(amp::GradScaler& s, Toy& t) { return s.step(*t.sgd) ? "stepped" : "skipped"; }
inline std::string update(amp::GradScaler& s, Toy&) {
  s.update();
  return "";
}
/// Every gradient set to `v`, then element 1 of the bias gradient to `odd` (unless 0).
inline auto set_grads(float v, float odd = 0.f) {
  return [=](amp::GradScaler&, Toy& t) {
    t.set_grads(v);
    if (odd != 0.f) t.layer->bias().grad.data<float>()[1] = odd;
    return std::string();
  };
}

}  // namespace mptest
