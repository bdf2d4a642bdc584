// src/dnn/cuda/step_graph.cpp — StepGraph (dtrain/dnn/backend.hpp) on the CUDA backend: the work a
// body queues on the backend's one stream, recorded by stream capture (cudaStreamBeginCapture in
// cudaStreamCaptureModeThreadLocal: a call of this thread that cannot be captured — cudaMalloc,
// a synchronization, a synchronous copy — fails and invalidates the capture, other threads stay
// free), instantiated once (cudaGraphInstantiateWithFlags) and launched (cudaGraphLaunch) on the
// same stream. CUDA Programming Guide, "CUDA Graphs" and "Stream Capture".
#include <exception>
#include <memory>
#include <string>

#include "cuda_backend.hpp"

namespace dtrain::cuda {
namespace {

/// "cudaStreamEndCapture: cudaErrorStreamCaptureInvalidated (operation failed due to a previous
/// error during capture)".
std::string error_text(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

class CudaStepGraph final : public StepGraph {
 public:
  explicit CudaStepGraph(CudaBackend& be) : be_(be) {}

  std::string capture(const std::function<void()>& body) override {
    exec_.reset();
    const cudaStream_t s = be_.stream();
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return error_text("cudaStreamBeginCapture", e);
    }
    std::string thrown;
    try {
      body();
    } catch (const std::exception& ex) {  // e.g. DT_CHECK_CUDA of a call capture refuses
      thrown = ex.what();
    }
    cudaGraph_t raw = nullptr;
    e = cudaStreamEndCapture(s, &raw);  // always: the stream leaves capture mode
    const Graph graph(raw);
    (void)cudaGetLastError();  // capture errors are not sticky: later calls start clean
    if (!thrown.empty()) return thrown;
    if (e != cudaSuccess) return error_text("cudaStreamEndCapture", e);
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return error_text("cudaGraphInstantiateWithFlags", e);
    }
    exec_ = GraphExec(exec);
    return "";
  }

  void replay() override {
    DT_REQUIRE(static_cast<bool>(exec_), "StepGraph::replay: nothing was captured");
    DT_CHECK_CUDA(cudaGraphLaunch(exec_, be_.stream()));
  }

 private:
  CudaBackend& be_;
  GraphExec exec_;  ///< the instantiated graph (the graph itself is freed after instantiation)
};

}  // namespace

std::unique_ptr<StepGraph> make_cuda_step_graph(CudaBackend& be) {
  return std::make_unique<CudaStepGraph>(be);
}

}  // namespace dtrain::cuda
