/// \file
/// MPI's return codes as tutti's errors (`check`: `MPI_ERR_TRUNCATE` means the ranks disagree,
/// a `mismatch_error`; any other code an `error(errc::aborted)` with `MPI_Error_string`'s text),
/// a caught error rethrown with a note (`rethrow_noting`), and sizes as MPI's int counts
/// (`as_count`).
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"

namespace tutti::detail::mpi_impl {

inline bool finalized() noexcept {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

inline std::string error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

/// Where an error happened: a string, or a function that makes one (only when it is needed, so
/// the calls that succeed build no strings).
template <class Where>
std::string describe(const Where& where) {
  if constexpr (std::is_invocable_v<const Where&>) return where();
  else return std::string(where);
}

/// An MPI return code as a tutti error: truncation means the ranks disagree; anything else
/// leaves the communicator unusable.
template <class Where>
void check(int rc, const char* call, const Where& where) {
  if (rc == MPI_SUCCESS) [[likely]] return;
  int cls = rc;
  MPI_Error_class(rc, &cls);
  std::string msg = describe(where) + ": " + call + " failed: " + error_text(rc);
  if (cls == MPI_ERR_TRUNCATE) throw mismatch_error(msg);
  throw error(errc::aborted, msg);
}

/// Rethrows the exception being handled, as the same type and origin, with `note` added to its
/// message.
[[noreturn]] inline void rethrow_noting(const std::string& note) {
  auto noted = [&](const error& e, auto copy) {
    if (const std::string* account = error_origin::account(e)) error_origin::set(copy, e.origin(), *account);
    return copy;
  };
  try {
    throw;
  } catch (const fingerprint_mismatch& e) {  // keeps both fingerprints (detail::restate_counts)
    throw noted(e, fingerprint_mismatch(own_text(e) + note, e.mine, e.me, e.theirs, e.peer));
  } catch (const mismatch_error& e) {
    throw noted(e, mismatch_error(own_text(e) + note));
  } catch (const timeout_error& e) {
    throw noted(e, timeout_error(own_text(e) + note));
  } catch (const peer_lost& e) {
    throw noted(e, peer_lost(own_text(e) + note));
  } catch (const usage_error& e) {
    throw noted(e, usage_error(own_text(e) + note));
  } catch (const error& e) {
    throw noted(e, error(static_cast<errc>(e.code().value()), own_text(e) + note));
  }
}

/// The ranks of an MPI communicator as failure notices name them (toolkit::raise_notice): a
/// notice's origin is a rank of MPI_COMM_WORLD. Used on the failure path only.
struct job_names {
  MPI_Comm comm;
  /// The rank of MPI_COMM_WORLD of `comm`'s rank r.
  int job_rank(int r) const { return translate(comm, r, MPI_COMM_WORLD); }
  /// "rank i" for world rank w in `comm`, else "world rank w".
  std::string job_name(int w) const {
    const int r = translate(MPI_COMM_WORLD, w, comm);
    return r >= 0 ? "rank " + std::to_string(r) : "world rank " + std::to_string(w);
  }
  static int translate(MPI_Comm from, int r, MPI_Comm to) {
    MPI_Group a, b;
    int out = MPI_UNDEFINED;
    if (MPI_Comm_group(from, &a) != MPI_SUCCESS) return -1;
    if (MPI_Comm_group(to, &b) == MPI_SUCCESS) {
      MPI_Group_translate_ranks(a, 1, &r, b, &out);
      MPI_Group_free(&b);
    }
    MPI_Group_free(&a);
    return out == MPI_UNDEFINED ? -1 : out;
  }
};

template <class Where>
int as_count(std::size_t n, const Where& where) {
  if (n > static_cast<std::size_t>(INT_MAX)) [[unlikely]]
    throw usage_error(describe(where) + ": " + std::to_string(n) +
                      " elements per call (or per rank's block) exceed MPI's int count; split the call");
  return static_cast<int>(n);
}

}  // namespace tutti::detail::mpi_impl
