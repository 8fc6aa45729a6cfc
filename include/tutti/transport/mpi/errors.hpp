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

/// Rethrows the exception being handled, as the same type, with `note` added to its message.
[[noreturn]] inline void rethrow_noting(const std::string& note) {
  auto noted = [&](const error& e) {
    std::string w = e.what();
    const std::string tail = ": " + e.code().message();  // what std::system_error appended
    if (w.size() >= tail.size() && w.compare(w.size() - tail.size(), tail.size(), tail) == 0) w.resize(w.size() - tail.size());
    return w + note;
  };
  try {
    throw;
  } catch (const mismatch_error& e) {
    throw mismatch_error(noted(e));
  } catch (const timeout_error& e) {
    throw timeout_error(noted(e));
  } catch (const peer_lost& e) {
    throw peer_lost(noted(e));
  } catch (const error& e) {
    throw error(static_cast<errc>(e.code().value()), noted(e));
  }
}

template <class Where>
int as_count(std::size_t n, const Where& where) {
  if (n > static_cast<std::size_t>(INT_MAX)) [[unlikely]]
    throw usage_error(describe(where) + ": " + std::to_string(n) +
                      " elements per call (or per rank's block) exceed MPI's int count; split the call");
  return static_cast<int>(n);
}

}  // namespace tutti::detail::mpi_impl
