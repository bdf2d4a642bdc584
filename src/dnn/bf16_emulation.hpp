// src/dnn/bf16_emulation.hpp (private) — Precision::bf16 where a backend has no fast bf16 kernel
// (the CPU backend on a CPU without bf16 instructions, a few ops on any CPU, and every op under
// CpuBf16::emulated): each op of the fp32 backend is wrapped so that its activations are stored
// in bf16 while it computes in fp32.
//
// A wrapped op converts its bf16 activation inputs to fp32 scratch, rounds the fp32 weights it
// reads to bf16 values (as a GPU's bf16 tensor-core kernels read bf16 copies of them), runs the
// fp32 op — products of bf16 values are exact in fp32 and the sums accumulate in fp32, the
// arithmetic of bf16 tensor cores — and rounds its activation outputs to bf16. Parameter
// gradients, running statistics, the loss and its statistics stay fp32. The numerics of the
// native CUDA bf16 path, so the model code of mixed precision is tested on any machine; it is
// slower than fp32 (every call converts), a test and reference path, not a speed setting.
//
// Scratch: the wrapped ops of one backend share a handful of fp32 buffers (the backend runs one op
// at a time), each grown to the largest request, so a model costs a few activation-sized buffers
// rather than several per op.
#pragma once

#include <memory>

#include "dtrain/dnn/backend.hpp"

namespace dtrain {

class Bf16Emulation {
 public:
  /// `be` computes in fp32 and provides memory and cast(); it must outlive every wrapped op.
  explicit Bf16Emulation(Backend& be);
  ~Bf16Emulation();

  // Each wraps an fp32 op made for the same description.
  std::unique_ptr<ConvOp> wrap(const ConvDesc& d, std::unique_ptr<ConvOp> op);
  std::unique_ptr<PoolOp> wrap(const PoolDesc& d, std::unique_ptr<PoolOp> op);
  std::unique_ptr<BatchNormOp> wrap(const BatchNormDesc& d, std::unique_ptr<BatchNormOp> op);
  std::unique_ptr<DenseOp> wrap(const DenseDesc& d, std::unique_ptr<DenseOp> op);
  std::unique_ptr<ActivationOp> wrap_activation(const Shape& s, std::unique_ptr<ActivationOp> op);
  std::unique_ptr<DropoutOp> wrap_dropout(const Shape& s, std::unique_ptr<DropoutOp> op);
  std::unique_ptr<SoftmaxXentOp> wrap_loss(int batch, int classes,
                                           std::unique_ptr<SoftmaxXentOp> op);

  /// The fp32 scratch shared by the wrapped ops (defined in the .cpp).
  class Scratch;

 private:
  Backend& be_;
  std::shared_ptr<Scratch> scratch_;
};

}  // namespace dtrain
