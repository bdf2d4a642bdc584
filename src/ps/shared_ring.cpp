// dtrain/ps/shared_ring.cpp — memfd segments shared by a ps and the workers of its node.
#include "dtrain/ps/shared_ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {
std::string sys_error(const std::string& call) { return call + ": " + std::strerror(errno); }

float* map_rw(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<float*>(p);
}
}  // namespace

SharedRing SharedRing::create(std::size_t bytes) {
  DT_ASSERT(bytes > 0, "an empty shared ring");
  const int fd = memfd_create("dtrain-ps-ring", MFD_CLOEXEC);
  if (fd < 0) throw LibraryError(format_error(sys_error("memfd_create"), __FILE__, __LINE__));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string e = sys_error("ftruncate of the ps's shared ring to " +
                                    std::to_string(bytes) + " bytes");
    close(fd);
    throw LibraryError(format_error(e, __FILE__, __LINE__));
  }
  float* p = map_rw(fd, bytes);
  if (p == nullptr) {
    const std::string e =
        sys_error("mmap of the ps's shared ring (" + std::to_string(bytes) + " bytes)");
    close(fd);
    throw LibraryError(format_error(e, __FILE__, __LINE__));
  }
  return SharedRing(p, bytes, fd);
}

std::optional<SharedRing> SharedRing::open(int pid, int fd, std::size_t bytes, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    *why = sys_error("open " + path);
    return std::nullopt;
  }
  struct stat st {};
  if (fstat(mine, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    *why = path + " is " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes);
    close(mine);
    return std::nullopt;
  }
  float* p = map_rw(mine, bytes);
  if (p == nullptr) {
    *why = sys_error("mmap " + path);
    close(mine);
    return std::nullopt;
  }
  return SharedRing(p, bytes, mine);
}

SharedRing::SharedRing(SharedRing&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

SharedRing& SharedRing::operator=(SharedRing&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void SharedRing::reset() noexcept {
  if (data_ != nullptr) munmap(data_, bytes_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  bytes_ = 0;
}

SharedRing::~SharedRing() { reset(); }

}  // namespace dtrain
