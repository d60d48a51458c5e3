"""A dependency-free TensorBoard scalar writer (TFRecord framing + hand-encoded `Event` protos).

TF 2.21 no longer pulls in the `tensorboard` package, and importing TensorFlow costs ~3 s, so stages that
do not need TF (collect, evaluate) and the metrics API write event files with this instead. The format is
the documented one: each record is `len (u64) | masked_crc32c(len) | data | masked_crc32c(data)`, and `data`
is an `Event` proto (wall_time=1, step=2, file_version=3, summary=5 { value=1 { tag=1, simple_value=2 } }).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        bits = n & 0x7F
        n >>= 7
        if n:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_bytes(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _event(step: int, wall_time: float, *, version: str | None = None, scalars: dict[str, float] | None = None) -> bytes:
    msg = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3 | 0) + _varint(step)
    if version is not None:
        msg += _field_bytes(3, version.encode())
    if scalars:
        summary = b"".join(
            _field_bytes(1, _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", float(v)))
            for tag, v in scalars.items()
        )
        msg += _field_bytes(5, summary)
    return msg


class ScalarWriter:
    """Appends scalar summaries to one `events.out.tfevents.*` file in `logdir`."""

    def __init__(self, logdir: str | os.PathLike[str]):
        path = Path(logdir)
        path.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        self.path = path / name
        self._f = open(self.path, "ab")
        self._write(_event(0, time.time(), version="brain.Event:2"))

    def _write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self._f.write(header + struct.pack("<I", _masked(header)) + data + struct.pack("<I", _masked(data)))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self._write(_event(step, time.time(), scalars=values))
        self._f.flush()

    def close(self) -> None:
        self._f.close()
