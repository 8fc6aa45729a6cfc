/// \file
/// `tutti::tcp`: ranks on any hosts, over TCP, on standalone Asio (`ASIO_STANDALONE`; CMake
/// target `tutti::tcp`, Debian `libasio-dev`). Not included by `tutti/tutti.hpp`.
///
/// - Start-up (`tcp::from_env`): rank 0 serves the rendezvous store (`store_server`) on
///   `MASTER_ADDR:MASTER_PORT`; every rank listens on an ephemeral port of the address it
///   advertises, publishes "address port" in the store, connects to every higher rank and
///   accepts every lower one: a full mesh, `TUTTI_TCP_STREAMS` connections per pair, each
///   opened with a hello (job token, job id, ranks, world size, stream count) that the acceptor
///   checks and answers. The advertised address is that of `TUTTI_SOCKET_IFNAME` when set,
///   otherwise the local address of this rank's connection to the store (the address on the
///   route to the master); IPv4 and IPv6 both work.
/// - A connection whose hello is not a rank of this job's (wrong magic, version, token or job
///   id, a length past its cap, a hello cut short) is refused, closed and logged on stderr with
///   the peer's address and what was wrong (never the token), and the start-up goes on; a rank
///   of this job that disagrees (world size, streams, a duplicate rank) fails it. The hello, the
///   answer and the frame header are parsed by pure functions (`detail::tcp_impl::
///   parse_mesh_hello`, `store_impl::parse_answer_head`, `parse_frame_head`, in the Asio-free
///   tcp/wire.hpp), which the fuzz target `tests/fuzz/tcp_frame.cpp` calls too; an acceptor
///   buffers at most one hello (`max_hello_bytes`, 548) per connection. Start-up, a group's
///   connections and a shrink serve the listening socket alike (`hello_queue`): the hellos of
///   all waiting connections are read side by side as their bytes arrive, so one that says
///   nothing delays no rank; it is closed after `hello_time` (a quarter of the deadline, 1 s
///   to 10 s), and at most 64 wait at once, 32 from one address.
/// - Sockets: `TCP_NODELAY`; `SO_SNDBUF`/`SO_RCVBUF` of `TUTTI_TCP_BUFFER_BYTES` (default 4 MiB,
///   applied only where the kernel's `net.core.[rw]mem_max` allows it, since a clamped buffer
///   is smaller than what autotuning reaches; set the variable to force it, 0 to leave the
///   kernel's autotuning).
/// - A message is a 64-byte frame (`toolkit::wire::frame`: magic, the fingerprint with the
///   communicator's context, the byte count) and the payload, written with one gather write (`sendmsg` of both buffers)
///   straight from the caller's memory. The receiver reads the header, checks it
///   (`detail::check_header`), then reads the payload straight into the destination. With
///   several streams, payloads of at least `TUTTI_TCP_STRIPE_BYTES` (256 KiB) are cut into one
///   64-byte aligned part per stream, moved at once.
/// - `recv_with` (`zero_copy_recv`) reads in pieces of 256 KiB into a per-connection buffer and
///   hands each piece to the consumer as it completes, so a reduction overlaps the arrival of
///   the rest of the message; `recv` does not use it.
/// - Sockets are non-blocking; a call moves whatever it can on every socket it uses (so
///   `sendrecv` is full duplex, with no helper thread), spins briefly (`TUTTI_TCP_SPIN_US`),
///   then waits in `poll()` no longer than the deadline: `timeout_error` names the peer, the
///   collective, the algorithm and the bytes.
/// - Point-to-point (`isend`/`irecv`, `send`/`recv`) is matched by source and tag over one more
///   connection per pair, apart from the streams (`matched_p2p`, tcp/matching.hpp): eager up to
///   64 KiB, larger messages by rendezvous straight into the receive buffer.
/// - A sub-group (`split`, `new_group`) gets connections of its own: its members connect to each
///   other again (a group hello carrying the group's context, accepted on the listening socket
///   every rank keeps open for the job's life), so a group and its world, each driven by its own
///   thread (or progress engine), never share a stream. Within one communicator every rank
///   calls in the same order and the fingerprint catches any disagreement.
/// - A rank that returns right after its last send closes gracefully: it shuts down its sending
///   side and waits (at most min(TUTTI_TIMEOUT, 10 s)) until each peer has acknowledged all of
///   it, so a peer still reading is not cut off by a reset.
/// - A peer that closes its connection (exit, crash, `fail()`) raises `peer_lost` naming it;
///   `fail()` first sends the reason (up to `toolkit::max_notice_text`, cut where a reader can
///   tell), when the stream is between messages; a usage error's text goes ahead as a note (the
///   rank's last words), which peers quote if the rank then goes away. A header without the
///   magic raises `error(errc::aborted)` naming the peer.
/// - A rank that times out first tells every peer so (a stall notice with its message, where the
///   stream is between messages), then waits half a second for a notice from the peer it waited
///   for (after a stall notice, up to a second more for the failure notice that follows). If
///   that peer is itself stuck (it waits for a stopped rank, say), the error carries the peer's
///   message, so a chain of waiting ranks names the rank that holds them up, whichever of them
///   timed out first. A reader that finds a stall notice keeps waiting for the final one.
/// - Ranks that disagree about a call may each wait to receive from the other (two ranks that
///   each take the other for the root). A receive without its header after 20 ms writes a
///   64-byte waiting notice (its fingerprint) to every peer, once per call, where the stream is
///   between messages; a peer that meets it where it expects a header from a different call
///   raises `mismatch_error` naming both, and drops it otherwise.
/// The parts, one file each under tutti/transport/tcp/: options, wire (Asio-free parsers),
/// sockets, startup, and the `tcp` class with its data path and notices (transport.hpp).
#pragma once
#define TUTTI_TRANSPORT_TCP_HPP 1

#include "tutti/transport/tcp/transport.hpp"
// The separately compiled mode: communicator<tcp> is among tutti::compiled's instances.
#include "tutti/compiled.hpp"
