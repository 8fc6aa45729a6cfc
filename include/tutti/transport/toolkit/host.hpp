/// \file
/// What a transport asks of the host it runs on: how many cores this process may use (ranks
/// that outnumber them must not spin), and whether a local process is stopped (SIGSTOP, a
/// debugger) rather than slow, so a timeout can name the rank that holds everyone up.
#pragma once

#include "tutti/detail/attributes.hpp"

namespace tutti::toolkit {

/// The cores this process may run on (its affinity mask), at least 1.
TUTTI_DECL int cores_available() noexcept;

/// Whether `local_ranks` ranks on this host outnumber its cores: then a waiting rank must not
/// spin, or it starves the rank it waits for.
inline bool oversubscribed(int local_ranks) noexcept { return local_ranks > cores_available(); }

/// Whether process `pid` (of this host) is stopped (SIGSTOP, SIGTSTP, a tracer), from /proc.
bool process_stopped(int pid) noexcept;

}  // namespace tutti::toolkit

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/host.ipp"
#endif
