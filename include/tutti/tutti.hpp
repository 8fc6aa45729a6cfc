/// \file
/// The umbrella header: the communicator, every algorithm and reduce op, and the transports that
/// need nothing beyond the standard library and Linux (inproc, shm). Included apart, each with a
/// header of its own: transports with optional dependencies, tutti/transport/tcp.hpp (Asio,
/// target tutti::tcp) and tutti/transport/mpi.hpp (MPI, target tutti::mpi); and the compositions
/// of communicators, tutti/group/mesh.hpp (`tutti::mesh`, named axes) and
/// tutti/group/hierarchy.hpp (`tutti::hierarchy`, levels of transports), which most programs do
/// not use and which would make every program that includes this header compile them.
#pragma once

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/channel.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/schedule.hpp"
#include "tutti/algorithm/shared_memory.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/float16.hpp"
#include "tutti/core/memory.hpp"
#include "tutti/core/op_id.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/group/request.hpp"
#include "tutti/group/threads.hpp"
#include "tutti/op/binned.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/inproc.hpp"
#include "tutti/transport/shm.hpp"
#include "tutti/transport/toolkit.hpp"
#include "tutti/transport/transport.hpp"
// The separately compiled mode: the template instances tutti::compiled holds.
#include "tutti/compiled.hpp"
