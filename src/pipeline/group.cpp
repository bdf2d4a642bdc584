// src/pipeline/group.cpp — a pipelined job's placement, communicators and checkpoint slicing
// (see pipeline/group.hpp).
#include "dtrain/pipeline/group.hpp"

#include <string>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

PipelinePlace pipeline_place(int worker, int workers, int stages) {
  DT_REQUIRE(stages >= 1 && workers % stages == 0,
             "option --pipeline-stages " + std::to_string(stages) + ": the " +
                 std::to_string(workers) +
                 " workers must be a whole number of pipelines (a "
                 "multiple of the stages: D data-parallel replicas x P stages)");
  PipelinePlace p;
  p.stages = stages;
  p.replicas = workers / stages;
  p.replica = worker / stages;
  p.stage = stages - 1 - worker % stages;
  return p;
}

std::unique_ptr<Cluster> stage_ps_cluster(const Cluster& cluster, int stages,
                                          const std::vector<int>& stage_of_ps) {
  const int W = cluster.num_workers();
  const int mine = cluster.is_ps() ? stage_of_ps.at(static_cast<std::size_t>(cluster.me().index))
                                   : pipeline_place(cluster.me().index, W, stages).stage;
  std::vector<int> ps, workers(static_cast<std::size_t>(W / stages));
  for (int k = 0; k < static_cast<int>(stage_of_ps.size()); ++k)
    if (stage_of_ps[static_cast<std::size_t>(k)] == mine) ps.push_back(k);
  for (int w = 0; w < W; ++w) {
    const PipelinePlace p = pipeline_place(w, W, stages);
    if (p.stage == mine) workers[static_cast<std::size_t>(p.replica)] = w;
  }
  return std::make_unique<Cluster>(cluster, mine, ps, workers);
}

namespace {
/// [begin, end) of the flat buffer that the tensors of layers [first, last] fill.
void range_of(const std::vector<TensorInfo>& ts, const LayerRange& r, std::size_t& begin,
              std::size_t& end) {
  begin = end = 0;
  bool any = false;
  for (const TensorInfo& t : ts) {
    const auto layer = static_cast<std::size_t>(std::stoul(t.name));  // "<layer>.<type>.<param>"
    if (layer < r.first || layer > r.last) continue;
    if (!any) begin = t.offset;
    end = t.offset + t.count;
    any = true;
  }
  if (!any) {  // no tensors: an empty range where the stage's would start
    for (const TensorInfo& t : ts)
      if (static_cast<std::size_t>(std::stoul(t.name)) < r.first) begin = end = t.offset + t.count;
  }
}
}  // namespace

PipelineGroup::PipelineGroup(const Cluster& cluster, const Model& whole, const PipelinePlan& plan)
    : whole_(whole), plan_(plan),
      place_(pipeline_place(cluster.me().index, cluster.num_workers(), plan.stages)) {
  range_of(whole.param_tensors(), layers(), param_begin_, param_end_);
  range_of(whole.state_tensors(), layers(), state_begin_, state_end_);
  DT_CHECK_MPI(MPI_Comm_split(cluster.role_comm(), place_.replica, place_.stage, &pipe_));
  DT_CHECK_MPI(MPI_Comm_split(cluster.role_comm(), place_.stage, place_.replica, &replicas_));
  stage_cluster_ = std::make_unique<Cluster>(replicas_, 0);
}

PipelineGroup::~PipelineGroup() {
  stage_cluster_.reset();
  if (pipe_ != MPI_COMM_NULL) MPI_Comm_free(&pipe_);
  if (replicas_ != MPI_COMM_NULL) MPI_Comm_free(&replicas_);
}

LayerRange PipelineGroup::layers() const {
  const PipelineStage& st = plan_.stage.at(static_cast<std::size_t>(place_.stage));
  return {st.first, st.last};
}

CheckpointState PipelineGroup::slice(const CheckpointState& whole) const {
  CheckpointState s = whole;
  auto cut = [](const std::vector<float>& v, std::size_t a, std::size_t b) {
    return v.empty() ? v
                     : std::vector<float>(v.begin() + static_cast<long>(a),
                                          v.begin() + static_cast<long>(b));
  };
  s.params = cut(whole.params, param_begin_, param_end_);
  s.m = cut(whole.m, param_begin_, param_end_);
  s.v = cut(whole.v, param_begin_, param_end_);
  s.model_state.clear();
  const std::size_t S = whole_.state_count();
  for (int r = 0; r < whole.state_rows && S > 0; ++r) {
    const auto row = whole.model_state.begin() + static_cast<long>(r * S);
    s.model_state.insert(s.model_state.end(), row + static_cast<long>(state_begin_),
                         row + static_cast<long>(state_end_));
  }
  s.param_tensors.clear();
  s.buffer_tensors.clear();
  return s;
}

namespace {
/// Gathers every rank's `mine` to `root` in rank order (MPI_Igatherv with the deadline).
std::vector<float> gather(const std::vector<float>& mine, MPI_Comm comm, int root,
                          std::vector<int>& counts) {
  int size = 0, rank = 0;
  DT_CHECK_MPI(MPI_Comm_size(comm, &size));
  DT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  const int n = static_cast<int>(mine.size());
  counts.assign(static_cast<std::size_t>(size), 0);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm, &req));
  wait_one(req, comm_timeout(), "pipeline: gathering a checkpoint's stage sizes");
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  std::vector<float> all(rank == root ? static_cast<std::size_t>(offsets.back() + counts.back())
                                      : 0);
  DT_CHECK_MPI(MPI_Igatherv(mine.data(), n, MPI_FLOAT, all.data(), counts.data(), offsets.data(),
                            MPI_FLOAT, root, comm, &req));
  wait_one(req, comm_timeout(), "pipeline: gathering a checkpoint's stages to the chief");
  return all;
}
}  // namespace

bool PipelineGroup::assemble(CheckpointState& s) const {
  const int root = place_.stages - 1;  // the chief's stage
  std::vector<int> counts;
  s.params = gather(s.params, pipe_, root, counts);
  s.m = gather(s.m, pipe_, root, counts);
  s.v = gather(s.v, pipe_, root, counts);
  // Batch-norm rows: each stage sends its rows × its statistics; row r of the whole model is
  // every stage's row r, in stage order.
  const std::vector<float> blocks = gather(s.model_state, pipe_, root, counts);
  if (place_.stage != root) return false;
  const auto rows = static_cast<std::size_t>(s.state_rows);
  s.model_state.assign(rows * whole_.state_count(), 0.0f);
  std::size_t at = 0, col = 0;
  for (const int count : counts) {
    const std::size_t width = static_cast<std::size_t>(count) / std::max<std::size_t>(rows, 1);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < width; ++k)
        s.model_state[r * whole_.state_count() + col + k] = blocks[at + r * width + k];
    at += static_cast<std::size_t>(count);
    col += width;
  }
  return true;
}

}  // namespace dtrain
