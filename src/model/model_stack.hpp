// src/model/model_stack.hpp (private) — Model::Stack: the layers built for one batch size, plus
// the loss op (model.cpp builds it; stage.cpp runs pipeline micro-batches on it).
#pragma once

#include <memory>
#include <vector>

#include "dtrain/model/model.hpp"

namespace dtrain {

struct Model::Stack {
  std::vector<std::unique_ptr<Layer>> layers;
  std::unique_ptr<SoftmaxXentOp> loss;  ///< the last stage's (or the whole model's) only
};

}  // namespace dtrain
