// dtrain/comm/big_message.hpp — non-blocking point-to-point messages of any byte size.
//
// An MPI count is an `int`, so `MPI_Isend(buf, n, MPI_BYTE, ...)` cannot describe n ≥ 2 GiB — and a
// parameter-server LOAD (params + m + v of a shard) passes that at ~179M parameters per ps. These
// functions take a std::size_t byte count: up to the count limit they post plain MPI_BYTE × n;
// above it they post one derived datatype that describes exactly n bytes (BigMPI's construction,
// Hammond et al. 2014): q contiguous blocks of `limit` bytes (MPI_Type_contiguous of
// MPI_Type_contiguous) plus a remainder block of n mod limit MPI_BYTEs (MPI_Type_create_struct),
// count 1. The datatype is committed, the operation posted, and the datatype freed at once (MPI
// defers the free until the operation completes). The type signature is a sequence of bytes either
// way, so any send matches any receive whose capacity is at least as large, whichever path each
// side took.
//
// The count limit is INT_MAX. **Test only:** the environment variable DTRAIN_TEST_MAX_MPI_COUNT (an
// integer in [1, INT_MAX]) lowers it, so the derived-datatype path runs with tiny messages
// (tests/cli/test_big_messages.sh, tests/mpi/test_big_message.cpp). It costs nothing but a
// datatype per message; never set it in production.
//
// Received sizes: nothing in dtrain reads a message's size from its status (the ps protocol knows
// every size from the shard table); if something ever must, MPI_Get_elements_x with the datatype
// of the receive is the call — MPI_Get_count on a count-1 derived receive says MPI_UNDEFINED.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>

namespace dtrain {

/// The largest count one MPI call takes (INT_MAX); for MPI_BYTE, bytes.
inline constexpr std::size_t kMpiMaxCount = INT_MAX;

/// Parses a DTRAIN_TEST_MAX_MPI_COUNT value: nullptr or "" → kMpiMaxCount, else a decimal integer
/// in [1, kMpiMaxCount]. Throws InputError naming the variable for anything else.
std::size_t parse_mpi_count_limit(const char* value);

/// The byte limit in force for this process: kMpiMaxCount, or DTRAIN_TEST_MAX_MPI_COUNT (test only)
/// when set. The variable is read once, on the first call. Throws InputError (as
/// parse_mpi_count_limit) when it is set to something invalid.
std::size_t mpi_count_limit();

/// What a message of some byte size is posted as. `derived`: `type` is a committed derived datatype
/// the caller must MPI_Type_free (free_byte_type); otherwise `type` is MPI_BYTE.
struct ByteType {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;  ///< elements of `type`: the bytes (MPI_BYTE), or 1 (derived)
  bool derived = false;
};

/// The (datatype, count) describing exactly `bytes` bytes: MPI_BYTE × bytes when bytes ≤ limit,
/// else one committed derived datatype of MPI_Type_size_x == bytes (see the file comment).
/// `limit` in [1, kMpiMaxCount]. Throws Error for a limit outside that range or when
/// bytes / limit exceeds INT_MAX blocks (only possible with a tiny test limit), LibraryError when
/// an MPI datatype call fails.
ByteType byte_type(std::size_t bytes, std::size_t limit);

/// Frees a derived ByteType (MPI_Type_free) and resets it to MPI_BYTE × 0; no-op otherwise.
/// Throws LibraryError when MPI_Type_free fails.
void free_byte_type(ByteType& t);

/// Posts a non-blocking send of `bytes` bytes from `buf` (MPI_Isend) to rank `dest` of `comm`
/// with `tag`; `*req` is the request to wait on. `buf` must stay valid and unmodified until then.
/// Uses the derived-datatype path above `limit` bytes. Throws LibraryError when an MPI call fails,
/// Error for an invalid `limit` (byte_type).
void isend_bytes(const void* buf, std::size_t bytes, int dest, int tag, MPI_Comm comm,
                 MPI_Request* req, std::size_t limit);
/// The same with limit = mpi_count_limit() (may throw its InputError).
void isend_bytes(const void* buf, std::size_t bytes, int dest, int tag, MPI_Comm comm,
                 MPI_Request* req);

/// Posts a non-blocking receive (MPI_Irecv) of at most `capacity` bytes into `buf` from `source`
/// (or MPI_ANY_SOURCE) with `tag` (or MPI_ANY_TAG). Any send of up to `capacity` bytes matches it,
/// whichever path either side took; a longer one fails the wait with MPI_ERR_TRUNCATE. The
/// message's length is not recorded: the protocol must know it (see the file comment). Throws as
/// isend_bytes.
void irecv_bytes(void* buf, std::size_t capacity, int source, int tag, MPI_Comm comm,
                 MPI_Request* req, std::size_t limit);
/// The same with limit = mpi_count_limit() (may throw its InputError).
void irecv_bytes(void* buf, std::size_t capacity, int source, int tag, MPI_Comm comm,
                 MPI_Request* req);

/// Operations this process has posted through the derived-datatype path (sends + receives). The
/// first one also logs one line ("# big messages: ...") to stdout, so a run shows it was taken.
std::uint64_t derived_messages_posted();

}  // namespace dtrain
