// tests/common/nets.hpp — small layer graphs shared by the model tests (CPU finite differences in
// test_model_graph.cpp, CPU/GPU parity in test_cuda_backend.cpp).
#pragma once

#include <string>
#include <vector>

namespace dtrain::test {

/// An Inception/ResNet-style graph on 1×C×6×6 (or larger) inputs: a concat of non-square convs, a
/// residual add whose input r0 feeds three layers (its gradient is a sum of three), in-place
/// relus, an option-A shortcut (avgpool kernel 1 stride 2 + zeropad), global average pooling.
inline const std::vector<std::string> kBranchyNet = {
    "conv filters=4 kernel=3 pad=1 bias=false name=c0",
    "batchnorm",
    "relu name=r0",
    "conv filters=3 kernel=1x3 pad=0x1",
    "relu name=b1",
    "conv filters=2 kernel=3x1 pad=1x0 input=r0 name=b2",
    "concat input=b1,b2",
    "conv filters=4 kernel=1 bias=false name=proj",
    "add input=proj,r0",
    "relu",
    "avgpool kernel=1 stride=2 name=sub",
    "zeropad channels=6",
    "globalavgpool",
    "dense",
};

}  // namespace dtrain::test
