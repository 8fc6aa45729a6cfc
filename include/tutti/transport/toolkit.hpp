/// \file
/// The transport toolkit: what every transport of tutti is made of besides its medium, for the
/// transports tutti ships and for the ones users write (docs/EXTENDING.md):
/// - `toolkit/wire.hpp`: the one 64-byte header frame and the fingerprint's fixed encoding;
/// - `toolkit/errors.hpp`: the header check and the texts of the contract (timeouts, failed and
///   departed peers, calls left behind, notice texts cut where a reader can tell);
/// - `toolkit/wait.hpp`: the wait loop (spin, yield, sleep; abort, liveness, deadline);
/// - `toolkit/group_map.hpp`: members, rank, context and sub-groups;
/// - `toolkit/host.hpp`: cores, oversubscription, stopped processes.
/// `tutti/testing/conformance.hpp` checks a transport against the contract.
#pragma once

#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/group_map.hpp"
#include "tutti/transport/toolkit/host.hpp"
#include "tutti/transport/toolkit/p2p.hpp"
#include "tutti/transport/toolkit/wait.hpp"
#include "tutti/transport/toolkit/wire.hpp"
