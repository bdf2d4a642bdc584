// dtrain/plan/profiler.hpp — the short profiling run of `dtrain plan`: one worker's train steps on
// random inputs of the job's sample shape, timed layer by layer (Model::set_layer_probe), and the
// optimizer's update of every parameter; the result is a WorkerProfile (model/profile.hpp).
//
// One warm-up step (first-touch allocations, oneDNN primitive creation, cuDNN algorithm choice)
// is left out; every time is the median over the timed steps, and the layers' medians are scaled
// to sum to the median step: on a machine shared with other work a preemption lands on one layer
// of one step, which that layer's median drops but the step's keeps (the per-layer medians of the
// Fashion-MNIST CNN summed to 18–25 ms where its median step took 31 ms on the loaded 2-core VM). A
// layer's forward time runs from the previous layer's end to its own; the loss (and its gradient)
// is counted in the backward of the last layer, which starts right after it. Fused layers
// (Backend::set_fuse) report ~0 and their host the pair. On a GPU every layer ends with
// Backend::synchronize(), which removes the overlap of kernel launches with the previous layer: GPU
// profiles read a few % high.
#pragma once

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/model/profile.hpp"

namespace dtrain {

/// Profiles the job `c` (its layers, data shape from --synthetic or --train-data, --device,
/// --threads, --precision, --optimizer) at `batch` samples per step over `steps` timed steps
/// (≥ 1) on this rank (`cluster` gives the node's placement for --threads 0 and the GPU).
/// Throws InputError for an encoded-image dataset (profile with --synthetic CxHxW:classes), and
/// what building the model or the backend throws.
WorkerProfile profile_worker(const Config& c, const Cluster& cluster, int batch, int steps);

/// The layers of the job `c`'s model (Model::layers(): type, name, trainable floats, ...) at its
/// input's sample shape and class count (--synthetic, or the --train-data file's header), built
/// without a backend: what a saved --profile is checked against. Throws InputError as
/// profile_worker() does for the input, and what building the model throws.
std::vector<LayerInfo> job_layers(const Config& c);

}  // namespace dtrain
