# tests/benchmarks/framework_args.sh — sourced by the scripts that run dtrain and PyTorch on the same
# job (bench_vs_pytorch.sh, tests/gpu/kernel_profile.sh): one place maps the benchmark's environment
# to both frameworks' flags, so the two stay like for like.
#   framework_args JOB MATH SAMPLES
#     JOB      job file; a job with `synthetic = CxHxW:classes` runs on synthetic data in both
#              (dtrain: SAMPLES samples, an epoch as long as the run; PyTorch: one random batch),
#              a file-based job trains without a test set (no evaluation interrupts the timing)
#     MATH     tf32 | fp32 (dtrain --math, pytorch_reference.py --math)
#     SAMPLES  synthetic samples dtrain generates (steps × batch of the whole run)
#   Env: PRECISION (fp32 | bf16, default fp32), CHANNELS_LAST=1 (--layout nhwc / --channels-last;
#        otherwise both NCHW: dtrain --layout nchw, whose default on the CPU is nhwc),
#        CUDNN_BENCHMARK=1 (--cudnn-benchmark true / --cudnn-benchmark), CONV_API (dtrain's
#        --conv-api: legacy, the default, | graph; PyTorch runs its convolutions through cuDNN's
#        graph API either way).
#   Sets the arrays DTRAIN_ARGS and TORCH_ARGS and the string BENCH_LABEL (", channels last, ..."
#   for the benchmark's title line).
framework_args() {
  local job=$1 math=$2 samples=$3 synthetic
  synthetic=$(grep -E '^\s*synthetic\s*=' "$job" | head -1 | sed 's/.*=\s*//' || true)
  DTRAIN_ARGS=(--math "$math" --precision "${PRECISION:-fp32}")
  TORCH_ARGS=(--math "$math" --precision "${PRECISION:-fp32}")
  BENCH_LABEL=""
  if [ -n "$synthetic" ]; then
    DTRAIN_ARGS+=(--synthetic "$synthetic" --synthetic-samples "$samples" --skip-nonfinite)
    TORCH_ARGS+=(--synthetic "$synthetic")
  else
    DTRAIN_ARGS+=(--test-data "")
  fi
  if [ "${CHANNELS_LAST:-0}" = 1 ]; then
    DTRAIN_ARGS+=(--layout nhwc)
    TORCH_ARGS+=(--channels-last)
    BENCH_LABEL+=", channels last"
  else
    DTRAIN_ARGS+=(--layout nchw)
  fi
  DTRAIN_ARGS+=(--conv-api "${CONV_API:-legacy}")
  if [ "${CUDNN_BENCHMARK:-0}" = 1 ]; then
    DTRAIN_ARGS+=(--cudnn-benchmark true)
    TORCH_ARGS+=(--cudnn-benchmark)
    BENCH_LABEL+=", cudnn benchmark"
  fi
}
