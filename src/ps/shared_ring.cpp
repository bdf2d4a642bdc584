// dtrain/ps/shared_ring.cpp — memfd segments shared by a ps and the workers of its node.
#include "dtrain/ps/shared_ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/core/fault.hpp"

namespace dtrain {
namespace {
std::string sys_error(const std::string& call) { return call + ": " + std::strerror(errno); }

/// A descriptor closed on every early return, until release() hands it over.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

char* map_rw(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

std::int64_t read_token(const char* base) {
  std::int64_t t = 0;
  std::memcpy(&t, base, sizeof t);
  return t;
}
}  // namespace

std::int64_t SharedRing::token() const { return read_token(base_); }

SharedRing SharedRing::create(std::size_t bytes) {
  DT_ASSERT(bytes > 0, "an empty shared ring");
  const std::size_t total = kHeaderBytes + bytes;
  if (fault_active(FaultKind::no_shared_memory))  // tests/cli/test_faults_shared_memory.sh
    throw LibraryError("memfd_create refused by DTRAIN_FAULT=no-shared-memory");
  FdGuard fd{memfd_create("dtrain-ps-ring", MFD_CLOEXEC)};
  if (fd.fd < 0) throw LibraryError(format_error(sys_error("memfd_create"), __FILE__, __LINE__));
  if (ftruncate(fd.fd, static_cast<off_t>(total)) != 0)
    throw LibraryError(format_error(
        sys_error("ftruncate of the ps's shared ring to " + std::to_string(total) + " bytes"),
        __FILE__, __LINE__));
  char* p = map_rw(fd.fd, total);
  if (p == nullptr)
    throw LibraryError(format_error(
        sys_error("mmap of the ps's shared ring (" + std::to_string(total) + " bytes)"), __FILE__,
        __LINE__));
  SharedRing ring(p, bytes, fd.release());  // unmapped and closed from here on if the token throws
  std::random_device rd;
  std::int64_t token = 0;
  while (token == 0)
    token = static_cast<std::int64_t>((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::memcpy(p, &token, sizeof token);
  return ring;
}

std::optional<SharedRing> SharedRing::open(int pid, int fd, std::size_t bytes, std::int64_t token,
                                           std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const std::size_t total = kHeaderBytes + bytes;
  if (fault_active(FaultKind::no_shared_memory)) {  // tests/cli/test_faults_shared_memory.sh
    *why = "open " + path + ": refused by DTRAIN_FAULT=no-shared-memory";
    return std::nullopt;
  }
  FdGuard mine{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  struct stat st {};
  if (mine.fd < 0) {
    *why = sys_error("open " + path);
  } else if (fstat(mine.fd, &st) != 0) {
    *why = sys_error("fstat " + path);
  } else if (static_cast<std::size_t>(st.st_size) != total) {
    *why = path + " is " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(total);
  } else if (char* p = map_rw(mine.fd, total); p == nullptr) {
    *why = sys_error("mmap " + path);
  } else {
    SharedRing ring(p, bytes, mine.release());
    if (ring.token() == token) return ring;
    *why = path + " is not the ps's ring (its token differs: another process under that pid?)";
  }
  return std::nullopt;
}

SharedRing::SharedRing(SharedRing&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

SharedRing& SharedRing::operator=(SharedRing&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void SharedRing::reset() noexcept {
  if (base_ != nullptr) munmap(base_, kHeaderBytes + bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  bytes_ = 0;
}

SharedRing::~SharedRing() { reset(); }

}  // namespace dtrain
