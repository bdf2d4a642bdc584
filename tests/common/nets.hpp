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

/// A VGG-style stack (Simonyan & Zisserman 2015: conv with bias → relu throughout, no batchnorm)
/// on 1×3×8×8 or larger inputs (H, W divisible by 4): four conv → relu pairs that layer fusion
/// runs as one layer each — 3→8 channels, 8→64 and 64→64 (on the CPU backend in NHWC the wide
/// ones read nhwc directly), one without bias — then a conv whose output a relu and an add both
/// read (not fused), and a dense → relu (dense has no fused relu).
inline const std::vector<std::string> kVggNet = {
    "conv filters=8 kernel=3 pad=1",
    "relu",
    "conv filters=64 kernel=3 pad=1",
    "relu",
    "maxpool kernel=2 stride=2",
    "conv filters=64 kernel=3 pad=1 bias=false",
    "relu",
    "conv filters=8 kernel=1",
    "relu",
    "conv filters=8 kernel=3 pad=1 name=c5",
    "relu name=r5",
    "add input=r5,c5",
    "maxpool kernel=2 stride=2",
    "flatten",
    "dense units=16",
    "relu",
    "dense",
};

/// jobs/fashion_mnist_cnn.ini without its batchnorms (conv → relu, as the CNN of the TensorFlow
/// and PyTorch tutorials), on 1×1×H×W inputs (H, W divisible by 4): two fused conv → relu pairs.
inline const std::vector<std::string> kConvReluCnn = {
    "conv filters=32 kernel=3 pad=1",
    "relu",
    "maxpool kernel=2",
    "conv filters=64 kernel=3 pad=1",
    "relu",
    "maxpool kernel=2",
    "flatten",
    "dense units=128",
    "relu",
    "dropout rate=0.3",
    "dense",
};

/// Four conv → relu pairs on 1×3×5×7 inputs whose outputs do not fill 16-byte packs evenly (the
/// GPU's vectorised bias + relu): odd planes (5×7), 3 channels (NHWC packs wrap around channels),
/// a conv without bias, planes of 2 pixels (NCHW packs span several channels), and an element
/// count per sample (14) that leaves a scalar tail for most batch sizes.
inline const std::vector<std::string> kOddConvReluNet = {
    "conv filters=3 kernel=3 pad=1",
    "relu",
    "conv filters=5 kernel=2 bias=false",
    "relu",
    "conv filters=6 kernel=3 stride=2",
    "relu",
    "conv filters=7 kernel=1",
    "relu",
    "globalavgpool",
    "dense",
};

}  // namespace dtrain::test
