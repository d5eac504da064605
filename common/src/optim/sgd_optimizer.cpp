// SGD with momentum and weight decay: its options, description and state's name. step() is
// lesson 01's task 2: the library is built with solutions/01_single_gpu/sgd.cpp.
#include "mgpu/optim/sgd.h"

#include <sstream>

namespace mgpu::optim {

SGD::SGD(std::vector<nn::Parameter*> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  MGPU_CHECK(options.momentum >= 0 && options.weight_decay >= 0, describe(),
             ": momentum and weight_decay must not be negative");
}

std::string SGD::describe() const {
  std::ostringstream os;
  os << "SGD(lr=" << lr() << ", momentum=" << options_.momentum
     << ", weight_decay=" << options_.weight_decay << ")";
  return os.str();
}

std::vector<std::string> SGD::state_keys() const { return {"momentum_buffer"}; }

}  // namespace mgpu::optim
