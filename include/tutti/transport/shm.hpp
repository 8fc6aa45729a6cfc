/// \file
/// `tutti::shm`: processes of one host, over one shared segment.
///
/// - Start-up (`shm::from_env`): rank 0 creates an anonymous memfd segment and passes it to the
///   other ranks over an abstract Unix socket named after the uid and the job id; every rank maps
///   and pre-faults it and closes the descriptor. Nothing has a name in any file system, so
///   nothing outlives the job, even after SIGKILL; the segment is not limited by /dev/shm.
/// - Point to point: one byte ring per ordered pair of ranks (head written only by the sender,
///   tail only by the receiver, each on its own cache line). A message is a 64-byte header
///   (fingerprint, byte count, magic) and the payload, padded to 64 bytes; it is written in
///   pieces as room appears, and a receiver reduces straight out of the ring (`zero_copy_recv`).
/// - Point-to-point matched by source and tag (`matched_p2p`: `isend`/`irecv` in any order,
///   `any_source`, `any_tag`): a second ring per ordered pair, of 64-byte frames: eager messages
///   up to 16 KiB, larger ones by rendezvous (matching.hpp).
/// - Windows: every rank of the world communicator owns a window every rank can load from, and a
///   monotonically increasing phase counter that it alone writes, next to the fingerprint of the
///   phase (one cache line). The native schedules of `tutti::algo::shared_memory` run on these.
/// - Single copy: a start-up probe checks that every rank can read every peer's memory with
///   process_vm_readv (seccomp, Yama or different users may forbid it); where it can, peers read
///   large inputs straight out of each other's processes (`offer_source` / `read_source`).
/// - Waiting spins briefly, then yields, then sleeps on the rank's process-shared futex
///   "doorbell", which writers ring only when the reader sleeps; so 4 ranks on 2 cores progress.
///   While it sleeps a rank checks its deadline and its peers: a peer that died (pidfd) or
///   failed raises `peer_lost` (with its reason, or its last words); a peer blocked in a
///   different collective, or a cycle of ranks each blocked sending to (or receiving from) the
///   next, raises `mismatch_error`.
///
/// The parts, one file each under tutti/transport/shm/: options, layout, segment (and liveness),
/// startup, rings, matching, windows, arena, diagnosis, shrink, and the `shm` class itself
/// (transport.hpp).
#pragma once

#include "tutti/transport/shm/transport.hpp"
