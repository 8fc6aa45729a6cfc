/// \file
/// The template instances tutti::compiled holds, in the separately compiled mode (`TUTTI_DECL` in
/// tutti/detail/attributes.hpp): `communicator<inproc>`, `communicator<shm>` and `communicator<tcp>`
/// (the last where tutti/transport/tcp.hpp is included), each with `algo::automatic`: their
/// members, `algo::automatic`'s (the choice and its explanations), and every collective's run on
/// erased elements of 1, 2, 4 and 8 bytes with every candidate schedule (`run_compiled`), so that
/// any element type of those sizes and any op, built-in or the program's own, runs schedules
/// compiled once. A program compiled with
/// `TUTTI_SEPARATE_COMPILATION` sees them declared here (`extern template`) and compiles them not
/// again; other communicators (another algorithm, a group's or a mesh's transport) are compiled
/// in the program as header-only. Included by tutti/tutti.hpp and tutti/transport/tcp.hpp; in
/// header-only mode it declares nothing.
// (No #pragma once: tcp.hpp includes this again for its section.)
#if defined(TUTTI_SEPARATE_COMPILATION)

#if !defined(TUTTI_COMPILED_HPP_CORE)
#define TUTTI_COMPILED_HPP_CORE
#include "tutti/group/communicator.hpp"
#include "tutti/transport/inproc.hpp"
#include "tutti/transport/shm.hpp"

namespace tutti {
namespace detail {
template <>
inline constexpr bool compiled_transport<inproc> = true;
template <>
inline constexpr bool compiled_transport<shm> = true;
}  // namespace detail
// automatic's choice and its explanations (the members automatic_of defines out of its class).
extern template struct algo::automatic_of<algo::ring, algo::tree, algo::recursive_doubling, algo::direct,
                                          algo::shared_memory, algo::native>;
extern template class communicator<inproc>;
extern template class communicator<shm>;
}  // namespace tutti
#endif

#if defined(TUTTI_TRANSPORT_TCP_HPP) && !defined(TUTTI_COMPILED_HPP_TCP)
#define TUTTI_COMPILED_HPP_TCP
namespace tutti {
namespace detail {
template <>
inline constexpr bool compiled_transport<tcp> = true;
}  // namespace detail
extern template class communicator<tcp>;
}  // namespace tutti
#endif

#endif  // TUTTI_SEPARATE_COMPILATION
