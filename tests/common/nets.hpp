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

/// Every layer whose memory order matters in the NHWC layout (Layout, dnn/backend.hpp), on
/// multi-channel 1×3×H×W inputs (H, W ≥ 4, even): convolutions with and without bias, square,
/// 1×3 and 3×1 (their KCRS weights converted to KRSC on cuDNN) and 1×1; batchnorm; a channel
/// concat and an option-A zeropad (channel slices); max and average pooling; a flatten and a dense
/// straight after a spatial tensor (both see the NCHW flattening); a residual add. No dropout: its
/// masks follow memory order.
inline const std::vector<std::string> kLayoutNet = {
    "conv filters=4 kernel=3 pad=1 name=c0",
    "batchnorm",
    "relu name=r0",
    "conv filters=3 kernel=1x3 pad=0x1 bias=false",
    "relu name=b1",
    "conv filters=2 kernel=3x1 pad=1x0 input=r0 name=b2",
    "concat input=b1,b2",
    "conv filters=4 kernel=1 bias=false name=proj",
    "add input=proj,r0",
    "maxpool kernel=2 name=p",
    "zeropad channels=6 name=z",
    "flatten",
    "dense units=5 name=d1",
    "avgpool kernel=2 stride=1 input=z",
    "dense units=5 name=d2",
    "add input=d1,d2",
    "relu",
    "dense",
};

/// Two ResNet blocks (He et al. 2016) on 1×3×8×8 inputs, every pattern layer fusion rewrites: a
/// bottleneck with an identity shortcut (r0 feeds a conv and the add: the conv adds its input
/// gradient in place), a stride-2 block with a projection shortcut (r1 feeds two convs),
/// batchnorm → relu (cuDNN's fused batchnorm + relu on GPUs in NHWC) and add → relu (one pass).
inline const std::vector<std::string> kResidualNet = {
    "conv filters=8 kernel=3 pad=1 bias=false",
    "batchnorm",
    "relu name=r0",
    "conv filters=4 kernel=1 bias=false",
    "batchnorm",
    "relu",
    "conv filters=4 kernel=3 pad=1 bias=false",
    "batchnorm",
    "relu",
    "conv filters=8 kernel=1 bias=false",
    "batchnorm name=bn3",
    "add input=bn3,r0",
    "relu name=r1",
    "conv filters=16 kernel=1 stride=2 bias=false",
    "batchnorm name=proj",
    "conv filters=16 kernel=3 stride=2 pad=1 bias=false input=r1",
    "batchnorm name=bn4",
    "add input=bn4,proj",
    "relu",
    "globalavgpool",
    "dense",
};

}  // namespace dtrain::test
