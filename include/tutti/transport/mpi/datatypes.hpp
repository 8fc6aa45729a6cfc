/// \file
/// Element types and ops as MPI's, for `algo::native`: integers by size and sign, float, double
/// and long double as MPI's predefined types, any other type as an opaque contiguous type of its
/// size (`datatype<T>`); sum, prod, min, max and the bitwise ops as MPI's where MPI defines them
/// for the type, any other pair as a user `MPI_Op` that runs tutti's kernels (`mpi_op<Op, T>`).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/core/dtype.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/mpi/errors.hpp"

namespace tutti::detail::mpi_impl {

/// A committed contiguous type of `bytes` bytes, made once per size (MPI frees it at finalize).
inline MPI_Datatype opaque_type(std::size_t bytes) {
  static std::mutex mu;
  static std::vector<std::pair<std::size_t, MPI_Datatype>> made;
  std::lock_guard lk(mu);
  for (auto& [b, t] : made)
    if (b == bytes) return t;
  MPI_Datatype t;
  check(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &t), "MPI_Type_contiguous", "tutti::mpi");
  check(MPI_Type_commit(&t), "MPI_Type_commit", "tutti::mpi");
  made.emplace_back(bytes, t);
  return t;
}

/// MPI has arithmetic for this element type (its predefined ops apply).
template <class T>
inline constexpr bool mpi_arithmetic =
    (std::is_integral_v<T> && !std::is_same_v<T, bool> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 ||
                                                           sizeof(T) == 8)) ||
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, long double>;

/// The MPI datatype of T: a predefined one where MPI has arithmetic for T, else an opaque
/// contiguous type of sizeof(T) bytes (moved, and reduced by a user op).
template <class T>
MPI_Datatype datatype() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<U, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<U, long double>) return MPI_LONG_DOUBLE;
  else if constexpr (mpi_arithmetic<U>) {  // every integer type, char included, by size and sign
    if constexpr (std::is_signed_v<U>) {
      if constexpr (sizeof(U) == 1) return MPI_INT8_T;
      else if constexpr (sizeof(U) == 2) return MPI_INT16_T;
      else if constexpr (sizeof(U) == 4) return MPI_INT32_T;
      else return MPI_INT64_T;
    } else {
      if constexpr (sizeof(U) == 1) return MPI_UINT8_T;
      else if constexpr (sizeof(U) == 2) return MPI_UINT16_T;
      else if constexpr (sizeof(U) == 4) return MPI_UINT32_T;
      else return MPI_UINT64_T;
    }
  } else {
    static const MPI_Datatype t = opaque_type(sizeof(U));
    return t;
  }
}

/// MPI has a predefined op for (Op, T).
template <class Op, class T>
constexpr bool has_predefined_op() {
  if constexpr (!mpi_arithmetic<T>) return false;
  else if constexpr (std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::prod> || std::is_same_v<Op, op::min> ||
                     std::is_same_v<Op, op::max>)
    return true;
  else return detail::is_bitwise_op<Op> && std::is_integral_v<T>;
}

/// MPI calls this with inout[i] = in[i] op inout[i]. It cannot carry the op object, so the op
/// is default-constructed: only stateless ops run natively.
template <class T, class Op>
void user_function(void* in, void* inout, int* len, MPI_Datatype*) noexcept {
  T* io = static_cast<T*>(inout);
  detail::combine(io, static_cast<const T*>(in), static_cast<const T*>(io), static_cast<std::size_t>(*len), Op{});
}

/// `Ordered`: for the scans, which apply the op in rank order: a user op is created
/// non-commutative, so that MPI keeps the order of its operands.
template <class Op, class T, bool Ordered = false>
MPI_Op mpi_op() {
  if constexpr (has_predefined_op<Op, T>()) {
    if constexpr (std::is_same_v<Op, op::sum>) return MPI_SUM;
    else if constexpr (std::is_same_v<Op, op::prod>) return MPI_PROD;
    else if constexpr (std::is_same_v<Op, op::min>) return MPI_MIN;
    else if constexpr (std::is_same_v<Op, op::max>) return MPI_MAX;
    else if constexpr (std::is_same_v<Op, op::band>) return MPI_BAND;
    else if constexpr (std::is_same_v<Op, op::bor>) return MPI_BOR;
    else return MPI_BXOR;
  } else {
    static_assert(std::is_empty_v<Op> && std::is_default_constructible_v<Op>,
                  "tutti::algo::native: MPI calls a user reduce op through a plain function pointer, so the op "
                  "must be stateless (an empty, default-constructible type); use another algorithm for an op "
                  "with state");
    // Ops are assumed commutative (see ops.hpp), which lets MPI reorder operands, except in the
    // scans.
    static const MPI_Op o = [] {
      MPI_Op made;
      check(MPI_Op_create(&user_function<T, Op>, Ordered ? 0 : 1, &made), "MPI_Op_create", "tutti::mpi");
      return made;
    }();
    return o;
  }
}

}  // namespace tutti::detail::mpi_impl
