// dtrain/ps/shared_ring.hpp — the chunk ring a ps shares with a worker on its own node.
//
// On one node MPI moves a large message by a copy that the receiving process makes (Open MPI's
// vader BTL: CMA process_vm_readv), so a ps copied in every chunk of every local worker's push
// itself, on its own core, and then its update. With a shared ring the worker writes its chunk
// into a slot of memory the ps maps too, the ps updates the slot in place (the new parameters
// over the gradient, as it does in its private ring) and the worker copies the reply out: the ps
// does only the update, each worker its own copies (the colocated-server layout of BytePS; MPI-3
// shared windows give the same memory, but need a collective call that the ps and workers make at
// different moments). Only the ownership of a slot travels by MPI, as a zero-byte message per
// chunk each way (ps/protocol.hpp, kFlagShm), so every wait keeps its deadline.
//
// The ps makes the segment (memfd_create: anonymous, freed with its last mapping, so a killed job
// leaves nothing in /dev/shm) and names it in its reply headers by pid and file descriptor; the
// worker maps it through /proc/<pid>/fd/<fd>, which needs the same user and a readable /proc —
// where it cannot, it says why once and keeps to MPI messages. The segment starts with a random
// token the header carries too, so a worker that sees another process under that pid (a ps in
// another PID namespace) refuses the segment instead of sharing the wrong memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dtrain {

/// A shared memory segment of `bytes` usable bytes, mapped read-write in this process, after a
/// kHeaderBytes header that holds its token.
class SharedRing {
 public:
  /// Bytes before the usable area: the token, padded to a cache line.
  static constexpr std::size_t kHeaderBytes = 64;
  /// Makes a segment of kHeaderBytes + `bytes` (> 0) bytes (memfd_create, ftruncate, mmap): zeros
  /// after a random nonzero token (token()). Throws LibraryError naming the call and errno's text
  /// when one fails.
  static SharedRing create(std::size_t bytes);
  /// Maps the segment that process `pid` holds open as descriptor `fd`, which must hold `bytes`
  /// usable bytes and start with `token`. Returns std::nullopt and sets *why (the call, path and
  /// errno's text, the size found, or a token mismatch) when it cannot be opened, is another
  /// size or segment, or cannot be mapped.
  static std::optional<SharedRing> open(int pid, int fd, std::size_t bytes, std::int64_t token,
                                        std::string* why);

  /// The usable area, `bytes()` long, 64-byte aligned.
  [[nodiscard]] float* data() const { return reinterpret_cast<float*>(base_ + kHeaderBytes); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  /// The segment's token (what a reply header names it by, with pid and descriptor).
  [[nodiscard]] std::int64_t token() const;
  /// This process's descriptor of the segment (what a worker opens through /proc).
  [[nodiscard]] int fd() const { return fd_; }

  SharedRing(SharedRing&& o) noexcept;
  SharedRing& operator=(SharedRing&& o) noexcept;
  SharedRing(const SharedRing&) = delete;
  SharedRing& operator=(const SharedRing&) = delete;
  /// Unmaps and closes; the memory is freed once no process maps or holds it.
  ~SharedRing();

 private:
  SharedRing(char* base, std::size_t bytes, int fd) : base_(base), bytes_(bytes), fd_(fd) {}
  void reset() noexcept;
  char* base_ = nullptr;  ///< the mapping: the header (the token), then data()
  std::size_t bytes_ = 0;
  int fd_ = -1;
};

}  // namespace dtrain
