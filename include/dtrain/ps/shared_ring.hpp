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
// where it cannot, it says why once and keeps to MPI messages.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dtrain {

/// A shared memory segment of `bytes`, mapped read-write in this process.
class SharedRing {
 public:
  /// Makes a segment of `bytes` (> 0) zero-filled bytes (memfd_create, ftruncate, mmap). Throws
  /// LibraryError naming the call and errno's text when one fails.
  static SharedRing create(std::size_t bytes);
  /// Maps the segment that process `pid` holds open as descriptor `fd`, which must be exactly
  /// `bytes` long. Returns std::nullopt and sets *why (the call, path and errno's text, or the
  /// size found) when it cannot be opened, is another size, or cannot be mapped.
  static std::optional<SharedRing> open(int pid, int fd, std::size_t bytes, std::string* why);

  /// The mapping, `bytes()` long, 64-byte aligned (page aligned).
  [[nodiscard]] float* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  /// This process's descriptor of the segment (what a worker opens through /proc).
  [[nodiscard]] int fd() const { return fd_; }

  SharedRing(SharedRing&& o) noexcept;
  SharedRing& operator=(SharedRing&& o) noexcept;
  SharedRing(const SharedRing&) = delete;
  SharedRing& operator=(const SharedRing&) = delete;
  /// Unmaps and closes; the memory is freed once no process maps or holds it.
  ~SharedRing();

 private:
  SharedRing(float* data, std::size_t bytes, int fd) : data_(data), bytes_(bytes), fd_(fd) {}
  void reset() noexcept;
  float* data_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
};

}  // namespace dtrain
