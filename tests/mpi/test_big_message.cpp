// tests/mpi/test_big_message.cpp — comm/big_message: messages of std::size_t bytes.
//  - byte_type describes exactly N bytes (MPI_Type_size_x, extent, lower bound), plain MPI_BYTE up
//    to the limit and one derived datatype above it, also for sizes past 2 GiB (no memory needed);
//  - DTRAIN_TEST_MAX_MPI_COUNT values are parsed strictly;
//  - a ring (rank r sends to r+1, receives from r−1; any world size) moves messages of odd sizes
//    (0, 1, 4095, 4096, 4097, 100003 bytes) with the limit lowered to 4096 and 1000 bytes: every
//    byte arrives, bytes past the message in a larger receive buffer are untouched, and the
//    derived path was taken (derived_messages_posted). Sender and receiver on different limits
//    (one side plain MPI_BYTE, the other derived) match too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <climits>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

struct Ring {
  int rank = 0, size = 1, next = 0, prev = 0;
};

Ring ring() {
  Ring r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size);
  r.next = (r.rank + 1) % r.size;
  r.prev = (r.rank + r.size - 1) % r.size;
  return r;
}

/// Byte i of the message `sender` sends of `bytes` bytes: differs by sender, size and position.
unsigned char pattern(int sender, std::size_t bytes, std::size_t i) {
  const std::size_t s = static_cast<std::size_t>(sender);
  return static_cast<unsigned char>((i * 131 + i / 251 + s * 17 + bytes) & 0xff);
}

const std::vector<std::size_t> kSizes = {0, 1, 4095, 4096, 4097, 100003};

TEST(BigMessage, ByteTypeDescribesExactlyTheBytes) {
  const std::size_t two_gib = std::size_t{1} << 31;
  const std::size_t load_268m = 48 + 3 * std::size_t{268480522} * 4;  // docs/results/big_messages
  const std::vector<std::size_t> sizes = {
      0, 1, 4095, 4096, 4097, 100003, kMpiMaxCount, two_gib, two_gib + 5, load_268m, 5000000003ULL};
  for (const std::size_t limit :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, kMpiMaxCount}) {
    for (const std::size_t bytes : sizes) {
      if (bytes / limit > kMpiMaxCount) {  // too many blocks: refused, not wrapped
        EXPECT_THROW(byte_type(bytes, limit), Error) << bytes << " bytes, limit " << limit;
        continue;
      }
      ByteType t = byte_type(bytes, limit);
      SCOPED_TRACE(std::to_string(bytes) + " bytes, limit " + std::to_string(limit));
      EXPECT_EQ(t.derived, bytes > limit);
      if (!t.derived) {
        EXPECT_EQ(t.type, MPI_BYTE);
        EXPECT_EQ(static_cast<std::size_t>(t.count), bytes);
        continue;
      }
      EXPECT_EQ(t.count, 1);
      MPI_Count size = 0, lb = -1, extent = 0;
      ASSERT_EQ(MPI_Type_size_x(t.type, &size), MPI_SUCCESS);
      ASSERT_EQ(MPI_Type_get_extent_x(t.type, &lb, &extent), MPI_SUCCESS);
      EXPECT_EQ(static_cast<std::size_t>(size), bytes);
      EXPECT_EQ(lb, 0);
      EXPECT_EQ(static_cast<std::size_t>(extent), bytes);
      free_byte_type(t);
      EXPECT_FALSE(t.derived);
      EXPECT_EQ(t.type, MPI_BYTE);
    }
  }
  EXPECT_THROW(byte_type(10, 0), Error);
  EXPECT_THROW(byte_type(10, kMpiMaxCount + 1), Error);
}

TEST(BigMessage, ParsesTheTestLimit) {
  EXPECT_EQ(parse_mpi_count_limit(nullptr), kMpiMaxCount);
  EXPECT_EQ(parse_mpi_count_limit(""), kMpiMaxCount);
  EXPECT_EQ(parse_mpi_count_limit("4096"), 4096u);
  EXPECT_EQ(parse_mpi_count_limit("1"), 1u);
  EXPECT_EQ(parse_mpi_count_limit("2147483647"), kMpiMaxCount);
  for (const char* bad :
       {"0", "-1", "+5", " 12", "12 ", "4k", "abc", "2147483648", "99999999999999999999999"}) {
    try {
      parse_mpi_count_limit(bad);
      ADD_FAILURE() << "accepted DTRAIN_TEST_MAX_MPI_COUNT='" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DTRAIN_TEST_MAX_MPI_COUNT"), std::string::npos)
          << e.what();
    }
  }
  // The process-wide limit: INT_MAX without the variable (as under ctest), else its value.
  const char* env = std::getenv("DTRAIN_TEST_MAX_MPI_COUNT");
  if (env == nullptr || *env == '\0')
    EXPECT_EQ(mpi_count_limit(), static_cast<std::size_t>(INT_MAX));
  else EXPECT_EQ(mpi_count_limit(), std::stoull(env));
}

/// Sends every size of kSizes around the ring, one at a time: the send with `send_limit`, the
/// receive (capacity = bytes + `slack`) with `recv_limit`. Checks every byte and the untouched
/// slack; returns how many operations went through the derived path on this rank.
std::uint64_t ring_exchange(std::size_t send_limit, std::size_t recv_limit, std::size_t slack) {
  const Ring r = ring();
  const std::uint64_t before = derived_messages_posted();
  std::uint64_t expected = 0;
  for (const std::size_t bytes : kSizes) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes, send limit " + std::to_string(send_limit) +
                 ", receive limit " + std::to_string(recv_limit) + ", slack " +
                 std::to_string(slack));
    std::vector<unsigned char> out(bytes), in(bytes + slack, 0xA5);
    for (std::size_t i = 0; i < bytes; ++i) out[i] = pattern(r.rank, bytes, i);
    std::vector<MPI_Request> reqs(2, MPI_REQUEST_NULL);
    const int tag = 700 + static_cast<int>(bytes % 97);
    irecv_bytes(in.data(), in.size(), r.prev, tag, MPI_COMM_WORLD, &reqs[0], recv_limit);
    isend_bytes(out.data(), bytes, r.next, tag, MPI_COMM_WORLD, &reqs[1], send_limit);
    expected += (in.size() > recv_limit) + (bytes > send_limit);
    wait_all(reqs, comm_timeout(), "big-message ring of " + std::to_string(bytes) + " bytes");
    std::size_t wrong = 0, first = bytes;
    for (std::size_t i = 0; i < bytes; ++i)
      if (in[i] != pattern(r.prev, bytes, i) && wrong++ == 0) first = i;
    EXPECT_EQ(wrong, 0u) << "first wrong byte at " << first << " of " << bytes;
    for (std::size_t i = bytes; i < in.size(); ++i)
      if (in[i] != 0xA5) {
        ADD_FAILURE() << "byte " << i << " past the message was overwritten";
        break;
      }
  }
  const std::uint64_t derived = derived_messages_posted() - before;
  EXPECT_EQ(derived, expected);
  return derived;
}

TEST(BigMessage, RingWithLoweredLimit) {
  EXPECT_EQ(ring_exchange(4096, 4096, 0), 4u);       // 4097 and 100003 bytes, each way
  EXPECT_EQ(ring_exchange(1000, 1000, 0), 8u);       // 4095..100003
  EXPECT_EQ(ring_exchange(4096, 4096, 100003), 8u);  // every receive (capacity > 4096) is derived
}

TEST(BigMessage, PlainAndDerivedSidesMatch) {
  // Plain MPI_BYTE sends into derived receives, and derived sends into plain receives.
  EXPECT_EQ(ring_exchange(kMpiMaxCount, 4096, 0), 2u);
  EXPECT_EQ(ring_exchange(4096, kMpiMaxCount, 0), 2u);
  EXPECT_EQ(ring_exchange(kMpiMaxCount, 1000, 5000), 6u);  // 0 + 5000 .. 100003 + 5000 > 1000
  EXPECT_EQ(ring_exchange(1000, kMpiMaxCount, 5000), 4u);
}

}  // namespace
}  // namespace dtrain
