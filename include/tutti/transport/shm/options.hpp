/// \file
/// `tutti::shm_options`: the sizes of the shared segment and the single-copy mode, from the
/// environment (`TUTTI_SHM_RING_BYTES`, `TUTTI_SHM_WINDOW_BYTES`, `TUTTI_SHM_ARENA_BYTES`,
/// `TUTTI_SHM_SINGLE_COPY`).
#pragma once

#include <cstddef>

#include "tutti/detail/attributes.hpp"

namespace tutti {

struct shm_options {
  std::size_t ring_bytes = std::size_t{256} << 10;    ///< per ordered pair of ranks
  std::size_t window_bytes = std::size_t{4} << 20;    ///< per rank, two halves
  std::size_t arena_bytes = std::size_t{256} << 20;   ///< per rank, for `allocate` (reserved, not touched)
  /// Single copy: peers read large inputs straight out of this process with `process_vm_readv`,
  /// where the start-up probe shows it works. `automatic`: unless ranks outnumber cores (the
  /// windows are faster there); `always`: even then (`TUTTI_SHM_SINGLE_COPY=1`); `never`
  /// (`TUTTI_SHM_SINGLE_COPY=0`).
  enum class mode { automatic, never, always };
  mode single_copy = mode::automatic;

  TUTTI_COLD static shm_options from_env(int world_size);
};

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/options.ipp"
#endif
