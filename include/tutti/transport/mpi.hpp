/// \file
/// `tutti::mpi`: the ranks of an MPI job (`mpirun`, `srun`), over MPI. Needs `<mpi.h>` and the
/// CMake target `tutti::mpi`; not included by `tutti/tutti.hpp`.
///
/// - Start-up (`mpi::from_env`): initialises MPI (`MPI_Init_thread`, asking for
///   `MPI_THREAD_MULTIPLE`) unless the program already did, and then finalises it at exit; checks
///   that the launcher's variables (`OMPI_COMM_WORLD_*`, `SLURM_PROCID`/`SLURM_NTASKS`,
///   `PMI_RANK`/`PMI_SIZE`, and `RANK`/`WORLD_SIZE`, `TUTTI_*` if set) agree with MPI's rank and
///   size; duplicates `MPI_COMM_WORLD` (`mpi::create` duplicates any communicator of yours) and
///   sets `MPI_ERRORS_RETURN` on the duplicate, so MPI errors become `tutti::error`s carrying
///   `MPI_Error_string`'s text instead of aborting the job.
/// - Point to point: a message is two MPI messages on the transport's own communicator, the
///   header (fingerprint and byte count) and then the payload, with distinct tags (collectives
///   and each user tag have their own pair, so user tags may be received in any order). The
///   receiver receives and checks the header (`toolkit::check_header`) before it posts the
///   payload's receive straight into the destination: no staging beyond what MPI itself does for
///   small (eager) messages. Payloads above 1 GiB go as several messages (MPI counts are `int`).
/// - Deadlines: every wait is `MPI_Isend`/`MPI_Irecv` (or a non-blocking collective) and an
///   `MPI_Test` loop that spins briefly, then yields, then sleeps in short steps, and raises
///   `timeout_error` naming the peer, the collective, the algorithm and the bytes. While it
///   waits, it looks for a failure notice from the peer (`fail`, which the communicator calls
///   when a collective fails on a rank), so peers of a failed rank raise `peer_lost` at once.
///   (`algo::native{.blocking = true}` opts out: MPI's blocking collectives, no deadline.)
/// - A collective's receive still without its header after 20 ms sends every peer a waiting
///   notice (its fingerprint; once per call, on its own tag) and reads the notices of the peer it
///   waits for: ranks that disagree so that they wait for each other (two ranks that each take
///   the other for the root) raise `mismatch_error` naming both instead of timing out.
/// - After a timeout or another failure the communicator is broken (as every communicator is),
///   and the failed call returns only once MPI is done with its buffers: it cancels the receive
///   of a header that has not come, takes the payload of one it refused (0-byte receives, so the
///   sender's send completes) and drives the rest until complete, for at most 2 s
///   (`settle_within`; a non-blocking collective, which MPI cannot cancel, too). What is still
///   pending then (a peer stopped mid-transfer) is kept, never freed, and the error says that
///   MPI may still read or write the call's buffers: end the job (or `MPI_Abort`) rather than
///   carry on. A broken communicator's MPI handle is
///   never freed, so that MPI cannot give its context id (and the messages still in flight on it)
///   to a later communicator.
/// - Sub-groups (`sub`) are new MPI communicators, made with `MPI_Comm_create_group`, which only
///   the members call (as `communicator::new_group` and `split` do). That call blocks without a
///   deadline, but the members have just agreed on the group over point to point.
/// - `algo::native` runs MPI's own collectives on it (`native_*`, mpi/native.hpp); built-in ops
///   on built-in element types map to `MPI_SUM`, ...; other pairs (float16, bfloat16, bool, user
///   types and ops) run tutti's kernels in a user `MPI_Op`.
///
/// Ranks must run the same build on the same architecture (headers travel as raw bytes).
///
/// The parts, one file each under tutti/transport/mpi/: errors (MPI's return codes as tutti's
/// errors), protocol (the tags, the header, how long a failed call settles), datatypes (element
/// types and ops as MPI's), state (what a transport's copies share, and how it ends), startup
/// (`from_env`, `create`, `sub`), shrink, wait (the wait loop, failure and waiting notices),
/// point_to_point (`exchange` and `settle`), native (`algo::native`'s collectives), and the
/// `mpi` class itself (transport.hpp), which declares every member and includes the parts that
/// define them.
#pragma once

#include "tutti/transport/mpi/transport.hpp"
