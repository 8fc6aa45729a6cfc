#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: real messages and frames as tutti sends them,
and malformed ones (wrong magic, truncated, oversized lengths, unknown versions and operations).
Run from anywhere: tests/fuzz/make_corpus.py (rewrites tests/fuzz/{store_message,tcp_frame}/)."""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# tutti/bootstrap/store/wire.hpp
STORE_MAGIC = 0x3154532D69747475  # "utti-ST1"
SET, GET, WAIT, ADD = 1, 2, 3, 4


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<I", len(b)) + b


STORE_VERSION = 2  # 2: the hello carries the job id after the token


def store_hello(token="tok", rank=0, world=2, version=STORE_VERSION, job="unit"):
    hello = struct.pack("<QIii", STORE_MAGIC, version, rank, world) + s(token)
    return hello + s(job) if version == STORE_VERSION else hello  # another version ends after the token


def frame(body):
    return struct.pack("<I", len(body)) + body


def op_set(k, v):
    return frame(struct.pack("<B", SET) + s(k) + s(v))


def op_get(k, timeout_ms=1000):
    return frame(struct.pack("<BQ", GET, timeout_ms) + s(k))


def op_wait(keys, timeout_ms=1000):
    return frame(struct.pack("<BQI", WAIT, timeout_ms, len(keys)) + b"".join(s(k) for k in keys))


def op_add(k, delta):
    return frame(struct.pack("<B", ADD) + s(k) + struct.pack("<q", delta))


store = {
    "session": store_hello() + op_set("tutti/addr/1", "127.0.0.1 40000") + op_get("tutti/addr/1")
    + op_wait(["a", "bb"]) + op_add("n", 5),
    "anonymous_hello": store_hello("", -1, 0, job=""),
    "hello_cut_short": store_hello()[:10],
    "hello_cut_in_job_id": store_hello(job="a-longer-job-id")[:-4],
    "wrong_magic": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "old_version": store_hello(version=1) + op_set("k", "v"),
    "wrong_version": store_hello(version=3) + op_set("k", "v"),
    "token_of_4GiB": struct.pack("<QIiiI", STORE_MAGIC, STORE_VERSION, 0, 2, 0xFFFFFFFF),
    "job_id_of_4GiB": store_hello(job="")[:-4] + struct.pack("<I", 0xFFFFFFFF),
    "frame_of_4GiB": store_hello() + b"\xff\xff\xff\xff",
    "key_past_frame": store_hello() + frame(struct.pack("<BI", SET, 1000) + b"abc"),
    "unknown_operation": store_hello() + frame(b"\x63"),
    "wait_for_5000_keys": store_hello() + frame(struct.pack("<BQI", WAIT, 1, 5000)),
    "bytes_after_request": store_hello() + frame(struct.pack("<B", SET) + s("k") + s("v") + b"xx"),
    "deadline_of_centuries": store_hello() + op_get("k", 1 << 62),
    "add_overflows": store_hello() + op_set("n", "9223372036854775807") + op_add("n", 1),
    "welcome_refused": struct.pack("<QBI", STORE_MAGIC, 2, 11) + b"wrong token",
    "reply_ok": struct.pack("<BI", 0, 3) + b"abc",
    "reply_of_4GiB": struct.pack("<BI", 0, 0xFFFFFFFF),
}

# tutti/transport/tcp/wire.hpp, tutti/transport/toolkit/wire.hpp (the 64-byte frame: magic u32,
# the fingerprint's 52-byte encoding, bytes u64)
MESSAGE_MAGIC = 0x6D697474  # "ttim"
FAILURE_MAGIC = 0x66697474  # "ttif"
STALL_MAGIC = 0x73697474    # "ttis"
WAITING_MAGIC = 0x77697474  # "ttiw"
NOTE_MAGIC = 0x6E697474     # "ttin"
HELLO_MAGIC = 0x6F6C6C6569747475  # "uttiello"
HELLO_VERSION = 2
ALL_REDUCE = 2


def wire(magic=MESSAGE_MAGIC, context=0, seq=3, count=7, shape=0, dtype=9, op=1, root=-1, algo=0, coll=ALL_REDUCE,
         elem_size=4, nbytes=28):
    fp = struct.pack("<QQQQIIiIBBH", context, seq, count, shape, dtype, op, root, algo, coll, elem_size, 0)
    assert len(fp) == 52  # toolkit::wire::fingerprint_bytes
    return struct.pack("<I", magic) + fp + struct.pack("<Q", nbytes)


def notice(magic, text=b"", nbytes=None):
    return wire(magic=magic, context=0, seq=0, count=0, dtype=0, op=0, root=0, coll=0, elem_size=0,
                nbytes=len(text) if nbytes is None else nbytes) + text


def mesh_hello(frm=1, world=3, stream=0, streams=1, job="unit", token="token", version=HELLO_VERSION):
    return struct.pack("<QIiiii", HELLO_MAGIC, version, frm, world, stream, streams) + s(job) + s(token)


tcp = {
    "message": wire() + b"\0" * 28,
    "message_other_count": wire(count=12, nbytes=48),
    "message_other_collective": wire(coll=1, seq=4),
    "message_of_2^64_bytes": wire(nbytes=(1 << 64) - 1),
    "message_unknown_collective": wire(coll=200),
    "message_unknown_dtype_op": wire(dtype=0xDEADBEEF, op=77, elem_size=255),
    "message_v_counts": wire(coll=9, count=40, shape=0x1234567890ABCDEF, nbytes=24),
    "failure_notice": notice(FAILURE_MAGIC, b"rank died."),
    "failure_notice_of_2^64_bytes": notice(FAILURE_MAGIC, nbytes=(1 << 64) - 1),
    "stall_notice": notice(STALL_MAGIC, b"rank 1 timed out"),
    "note": notice(NOTE_MAGIC, b"usage_error: gather: root 7 is outside 0..3"),
    "waiting_notice": wire(magic=WAITING_MAGIC, nbytes=0),
    "garbage": b"G" * 64,
    "header_cut_short": wire()[:20],
    "hello": mesh_hello(),
    "hello_cut_short": mesh_hello()[:20],
    "hello_job_id_of_2GiB": mesh_hello()[:28] + struct.pack("<I", 0x7FFFFFFF),
    "hello_token_of_4GiB": mesh_hello()[:28] + s("unit") + struct.pack("<I", 0xFFFFFFFF),
    "hello_wrong_version": mesh_hello(version=1),
    "answer_ok": struct.pack("<QBI", HELLO_MAGIC, 0, 0),
    "answer_refused": struct.pack("<QBI", HELLO_MAGIC, 1, 25) + b"wrong job token or job id",
    "answer_of_4GiB": struct.pack("<QBI", HELLO_MAGIC, 1, 0xFFFFFFFF),
}

for name, seeds in (("store_message", store), ("tcp_frame", tcp)):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for seed, data in seeds.items():
        with open(os.path.join(d, seed), "wb") as f:
            f.write(data)
    print(f"{d}: {len(seeds)} seeds")
