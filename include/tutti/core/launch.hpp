/// \file
/// What a transport that starts its own ranks as threads (`inproc::run`, `cuda_ipc::run`) hands
/// to the layer that makes communicators, without naming an algorithm or the communicator
/// (transports sit below both): the algorithm as `default_algorithm`, which group/ resolves to
/// `algo::automatic`, and the launch as a call of `launch_threads(thread_launch<Algorithm>{},
/// ...)`, found by argument-dependent lookup where the communicator is defined
/// (tutti/group/threads.hpp, included by tutti/tutti.hpp).
#pragma once

namespace tutti {

/// The communicator's default algorithm (`algo::automatic`), named below the algorithm layer.
struct default_algorithm {};

/// The tag of a threads launch of communicators with algorithm `Algorithm`.
template <class Algorithm>
struct thread_launch {};

}  // namespace tutti
