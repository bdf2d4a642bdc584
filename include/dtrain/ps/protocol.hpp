// dtrain/ps/protocol.hpp — the worker ⇄ ps wire protocol (Downpour SGD, Dean et al. 2012, in the
// fused push-pull shape of ps-lite).
//
// Every message is bytes on MPI_COMM_WORLD: a fixed MsgHeader, then floats. Sizes are std::size_t
// and messages go through comm/big_message.hpp (MPI_BYTE up to INT_MAX bytes, one derived datatype
// above: a LOAD or SNAPSHOT passes 2 GiB at ~179M parameters per ps). Receives are posted with the
// largest size the protocol allows there; no message's size is read back from MPI.
//   worker → ps  PULL        header                       ps → worker REPLY  header + shard params
//                (answered once the ps's global_step ≥ header.wait_step)
//   worker → ps  PUSH        header + shard gradient      ps → worker REPLY  header + fresh shard params
//                (sync through the ps / bounded staleness: once the update the push joins allows;
//                ps/server.hpp)
//   chief  → ps  LOAD        header + params, m, v        ps → chief  REPLY  header + shard params
//   chief  → ps  SNAPSHOT    header                       ps → chief  STATE  header + params, m, v
//                (LOAD and SNAPSHOT come from the chief, worker 0, only, and LOAD at most once
//                per run, before any PUSH: the ps's receive holds three parts only for the
//                chief's LOAD, one part otherwise; a longer message fails with MPI_ERR_TRUNCATE)
//   worker → ps  DONE        header                       (no reply; the ps exits after DONE from all)
// Why it cannot deadlock: a worker posts its receives before its sends and has at most one
// request outstanding per ps; a ps keeps one pre-posted receive per worker and answers each
// request before re-posting that worker's receive, so every send has a matching posted receive.
// A reply the ps holds back (waiting for other workers' pushes) keeps that worker's one request
// outstanding; the ps answers every held request when it stops applying updates (--max-steps,
// stop request), so no worker waits for a push that will never come.
// MPI's non-overtaking rule keeps each worker's messages in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace dtrain {

enum PsTag : int {
  kTagPull = 101,
  kTagPush = 102,
  kTagLoad = 103,
  kTagSnapshot = 104,
  kTagDone = 105,
  kTagReply = 110,
  kTagState = 111,
};

enum PsFlag : std::int32_t {
  kFlagStop = 1,     ///< a rank asked to stop (signal): checkpoint and exit at the next boundary
  kFlagDropped = 2,  ///< ps → worker: the push was not applied (late, or after the last step)
};

struct MsgHeader {
  std::int64_t global_step = 0;  ///< ps → worker: pushes applied by this ps; LOAD: step to resume at
  std::int64_t seen_step = 0;    ///< worker → ps: this ps's global_step at the worker's last reply
  std::int64_t staleness = 0;    ///< ps → worker: global_step at apply − seen_step
  std::int32_t samples = 0;      ///< worker → ps: samples behind this gradient (0: none, ignored)
  std::int32_t flags = 0;        ///< PsFlag bits
  std::int64_t max_steps = 0;    ///< LOAD: the run's --max-steps (0: none)
  std::int64_t wait_step = 0;    ///< PULL: answer once global_step ≥ wait_step
};
static_assert(sizeof(MsgHeader) == 48, "MsgHeader must keep the float payload 16-byte aligned");

/// Writes a message into `out`: the header, then floats [begin, begin + n) of each part in order
/// (a nullptr part is sent as n zeros). `out` must hold sizeof(MsgHeader) + parts·n floats.
/// Returns the message size in bytes. Used by both sides of the protocol.
template <typename Parts>
std::size_t pack_message(char* out, const MsgHeader& header, const Parts& parts,
                         std::size_t begin, std::size_t n) {
  std::memcpy(out, &header, sizeof header);
  std::size_t at = sizeof header;
  for (const float* p : parts) {
    if (p) std::memcpy(out + at, p + begin, n * sizeof(float));
    else std::memset(out + at, 0, n * sizeof(float));
    at += n * sizeof(float);
  }
  return at;
}

}  // namespace dtrain
