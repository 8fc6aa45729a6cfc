/// \file
/// Where memory lives. A view's type carries its memory kind (`view<T, Memory>`), so that a
/// schedule written for any kind cannot load or store through it: only the channel moves and
/// reduces its bytes, with the copy and reduce of the transport that owns that memory. Host
/// memory is the default and the only kind the CPU may touch; a device transport adds its own
/// kind (and its own copy and reduce).
#pragma once

#include <concepts>
#include <string_view>

namespace tutti {

/// A memory kind: a tag type naming where a view's elements live.
template <class M>
concept memory_kind = requires {
  { M::name } -> std::convertible_to<std::string_view>;
  { M::host_accessible } -> std::convertible_to<bool>;
};

/// This process's memory, which the CPU loads and stores directly.
struct host_memory {
  static constexpr std::string_view name = "host";
  static constexpr bool host_accessible = true;
};

/// A GPU's memory (CUDA device memory): only the device transports (`tutti::cuda_ipc`,
/// `tutti::nccl`) move and reduce it, with their own kernels; the CPU never dereferences it.
struct device_memory {
  static constexpr std::string_view name = "device";
  static constexpr bool host_accessible = false;
};

static_assert(memory_kind<host_memory> && memory_kind<device_memory>);

}  // namespace tutti
