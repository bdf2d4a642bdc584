// dtrain/comm/big_message.cpp — MPI_BYTE messages of std::size_t bytes (derived datatypes above
// the count limit, BigMPI-style).
#include "dtrain/comm/big_message.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {

constexpr const char* kLimitVar = "DTRAIN_TEST_MAX_MPI_COUNT";

std::atomic<std::uint64_t> g_derived{0};

/// Counts one derived-datatype operation; the first one in this process logs a line.
void note_derived(std::size_t bytes, std::size_t limit, const char* what) {
  if (g_derived.fetch_add(1) != 0) return;
  log_info("# big messages: " + std::string(what) + " " + std::to_string(bytes) +
           " bytes posted as one derived datatype (count limit " + std::to_string(limit) +
           (limit < kMpiMaxCount ? std::string(": a lowered test limit, see ") + kLimitVar + ")"
                                 : std::string(")")));
}

}  // namespace

std::size_t parse_mpi_count_limit(const char* value) {
  if (value == nullptr || *value == '\0') return kMpiMaxCount;
  const std::string s(value);
  const auto bad = [&] {
    return InputError(error_prefix() + kLimitVar + "='" + s + "': expected an integer in [1, " +
                      std::to_string(kMpiMaxCount) +
                      "] (test only: lowers the largest MPI count of one message)");
  };
  if (s.find_first_not_of("0123456789") != std::string::npos) throw bad();
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > kMpiMaxCount) throw bad();
  return static_cast<std::size_t>(v);
}

std::size_t mpi_count_limit() {
  static const std::size_t limit = parse_mpi_count_limit(std::getenv(kLimitVar));
  return limit;
}

ByteType byte_type(std::size_t bytes, std::size_t limit) {
  DT_ASSERT(limit >= 1 && limit <= kMpiMaxCount,
            "MPI count limit " + std::to_string(limit) + " outside [1, INT_MAX]");
  if (bytes <= limit) return {MPI_BYTE, static_cast<int>(bytes), false};
  const std::size_t q = bytes / limit, r = bytes % limit;
  if (q > kMpiMaxCount)  // only with a tiny DTRAIN_TEST_MAX_MPI_COUNT
    throw Error(format_error("a message of " + std::to_string(bytes) +
                                 " bytes needs more than "
                                 "INT_MAX blocks of the MPI count limit " +
                                 std::to_string(limit) + " bytes",
                             __FILE__, __LINE__));
  MPI_Datatype block = MPI_DATATYPE_NULL, blocks = MPI_DATATYPE_NULL, whole = MPI_DATATYPE_NULL;
  DT_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(limit), MPI_BYTE, &block));
  DT_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(q), block, &blocks));
  DT_CHECK_MPI(MPI_Type_free(&block));
  if (r == 0) {
    whole = blocks;
  } else {
    // {q blocks at 0, r bytes right after}: exactly `bytes` contiguous bytes.
    int lengths[2] = {1, static_cast<int>(r)};
    MPI_Aint displs[2] = {0, static_cast<MPI_Aint>(q * limit)};
    MPI_Datatype types[2] = {blocks, MPI_BYTE};
    DT_CHECK_MPI(MPI_Type_create_struct(2, lengths, displs, types, &whole));
    DT_CHECK_MPI(MPI_Type_free(&blocks));
  }
  DT_CHECK_MPI(MPI_Type_commit(&whole));
  return {whole, 1, true};
}

void free_byte_type(ByteType& t) {
  if (t.derived) DT_CHECK_MPI(MPI_Type_free(&t.type));
  t = ByteType{};
}

void isend_bytes(const void* buf, std::size_t bytes, int dest, int tag, MPI_Comm comm,
                 MPI_Request* req, std::size_t limit) {
  ByteType t = byte_type(bytes, limit);
  if (t.derived) note_derived(bytes, limit, "a send of");
  const int rc = MPI_Isend(buf, t.count, t.type, dest, tag, comm, req);
  free_byte_type(t);  // legal while the send is pending: MPI frees it after completion
  DT_CHECK_MPI(rc);
}

void isend_bytes(const void* buf, std::size_t bytes, int dest, int tag, MPI_Comm comm,
                 MPI_Request* req) {
  isend_bytes(buf, bytes, dest, tag, comm, req, mpi_count_limit());
}

void irecv_bytes(void* buf, std::size_t capacity, int source, int tag, MPI_Comm comm,
                 MPI_Request* req, std::size_t limit) {
  ByteType t = byte_type(capacity, limit);
  if (t.derived) note_derived(capacity, limit, "a receive of up to");
  const int rc = MPI_Irecv(buf, t.count, t.type, source, tag, comm, req);
  free_byte_type(t);
  DT_CHECK_MPI(rc);
}

void irecv_bytes(void* buf, std::size_t capacity, int source, int tag, MPI_Comm comm,
                 MPI_Request* req) {
  irecv_bytes(buf, capacity, source, tag, comm, req, mpi_count_limit());
}

std::uint64_t derived_messages_posted() { return g_derived.load(); }

}  // namespace dtrain
