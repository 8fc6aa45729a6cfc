/// \file
/// The rendezvous store: a small key-value store over TCP, as torch's TCPStore. Rank 0 serves it
/// on `MASTER_ADDR:MASTER_PORT` (`store_server`, a thread of rank 0's process); every rank,
/// rank 0 included, talks to it through a `store` client. Ranks publish their listening
/// addresses there, then build their connections (`tutti::tcp`).
///
/// - Operations: `set`, `get` (waits until the key exists), `wait(keys, timeout)`, `add` (an
///   atomic counter, its value kept as decimal text as torch does).
/// - Lifetime: the server lives as long as the object that owns it (for `tutti::tcp`: rank 0's
///   transport and its copies), so the port stays taken for the whole job, as with torch.
/// - Protocol: little-endian, length-prefixed frames. A client opens with a hello (magic,
///   version, rank, world size, job token, job id); the server answers with a welcome (ok or
///   refused, and why). A hello of another version is refused naming both versions. The parsers are pure functions of the bytes received (`store/wire.hpp`:
///   `parse_hello`, `parse_request`, `parse_reply_head`; `net/codec.hpp`: `parse_answer_head`),
///   which the server, the client and the fuzz target `tests/fuzz/store_message.cpp` call alike. Every length is
///   checked against its cap before anything is allocated or buffered for it (`max_token` 256 B
///   before the hello is buffered, so a stranger costs at most one 64 KiB read; `max_key` 4 KiB;
///   `max_value` 64 MiB, the largest value a client may set, hence `max_frame`; `max_keys` 4096
///   per wait; welcome texts 4 KiB). A malformed frame gets an error reply and its connection is
///   closed; bytes that are not this protocol (wrong magic) are closed without a word: never a
///   crash, never a huge allocation.
/// - Job token (`TUTTI_JOB_TOKEN`; tuttirun makes one): a client with another token is refused
///   and raises `config_error` saying so. The token keeps other jobs and strangers out; it
///   travels in clear and is no defence against someone who can read the network.
/// - Job id: a client that names a job other than the store's (a process left over from an
///   earlier job with the same MASTER_PORT and token) is refused, naming both ids; the store's
///   own clients never notice. A client that names none (a joiner, a tool, the anonymous ranks
///   of a job a shrink or a grow starts) is not checked.
/// - Every refused or dropped connection (wrong token, version, world size or rank, malformed
///   or foreign bytes, a hello cut short) is logged on stderr, naming the client's address and
///   what was wrong, never the token: "[tutti store 127.0.0.1:29500] refused a connection from
///   127.0.0.1:40112: wrong job token: ...". At most 100 such lines per server.
/// - Where it listens: on `MASTER_ADDR` only. Its default (tuttirun's, and `tutti::tcp`'s when
///   the variable is unset and every rank is on this host) is 127.0.0.1, so a one-host job's
///   store is reachable from this host only; a job across hosts names an address of node 0
///   that the others reach (`--master-addr`). Only when `MASTER_ADDR` is not an address of this
///   host (behind a NAT, or a name that resolves elsewhere) does it listen on every address,
///   and it says so on stderr. `store_server::address()` tells which.
/// - Start-up checks: a client claiming a rank some other client already claimed, or a world
///   size different from rank 0's, is refused; while the job starts, the server then fails every
///   wait of the job with the same message (naming both ranks and both values), so no rank hangs
///   until its deadline. Once every rank has signed in, such a client is none of the job's ranks:
///   it alone is refused (it learns why), and the job goes on as if it had never come.
/// - A start-up that lasts says what it waits for (bootstrap/progress.hpp), one line on stderr
///   after a quarter of TUTTI_TIMEOUT (at least 1 s, at most 3 s), then each time the wait has
///   doubled. Rank 0's store names for all the ranks that have signed in and those that have
///   not, and where it listens ("[tutti store 127.0.0.1:29500] start-up: after 3 s, 2 of 4 ranks signed
///   in (0, 1); waiting for ranks 2, 3 to sign in to the store at MASTER_ADDR:MASTER_PORT =
///   127.0.0.1:29500 (...)"); a rank that cannot reach the store says so itself, naming the
///   address it tries ("[tutti rank 2] start-up: cannot reach the store at ..."). At the deadline
///   every waiting rank's `timeout_error` names the ranks that never signed in ("store: ranks 2, 3
///   never signed in to the store at 127.0.0.1:29500 (not started, or started with another
///   MASTER_ADDR or MASTER_PORT?); ..."): the store sends them after the missing keys of its
///   timeout reply, following a newline. A start-up done within the first interval prints nothing.
/// - Port 0 asks the kernel for a free port; `store_server::port()` tells which. (Ranks need a
///   known `MASTER_PORT` to find the store, so in a job port 0 is what the ranks' own data
///   listeners use: they publish their real ports here.)
///
/// Files: `store/wire.hpp` (the protocol, pure), `store/server.hpp`, `store/client.hpp`; the
/// codec and socket helpers it shares with the tcp mesh are in `bootstrap/net/`.
#pragma once

#include "tutti/bootstrap/store/client.hpp"
#include "tutti/bootstrap/store/server.hpp"
#include "tutti/bootstrap/store/wire.hpp"
