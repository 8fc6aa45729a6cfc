/// \file
/// Definitions for tutti/core/dtype.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdio>

#include "tutti/core/dtype.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL std::string dtype_name(dtype d) {
  if (const char* n = detail::builtin_dtype_name(d.id)) return n;
  char buf[64];
  std::snprintf(buf, sizeof buf, "user type #%08x (%u bytes)", d.id, d.size);
  return buf;
}

}  // namespace tutti
