"""The few bpf(2) calls the testbed needs, through ctypes: open a pinned map (or one by its
id), read and write elements, map an array into memory, and consume a BPF ring buffer.

No library binding is used because the consumers run inside Ryu's eventlet loop, where a
plain file descriptor and `mmap` behave predictably; libbpf's Python bindings are not
packaged for Debian 12. x86_64 and aarch64 syscall numbers only.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct

_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_OBJ_GET = 7
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
PAGE = mmap.PAGESIZE


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, 128)
    ret = _libc.syscall(_SYSCALL_BPF, cmd, buf, 128)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return ret


class Map:
    """A pinned BPF map: fixed-size keys and values as bytes."""

    def __init__(self, path: str, fd: int | None = None):
        self.path = path
        if fd is None:
            cpath = ctypes.create_string_buffer(path.encode())
            fd = _bpf(BPF_OBJ_GET, struct.pack("QII", ctypes.addressof(cpath), 0, 0))
        self.fd = fd
        info = ctypes.create_string_buffer(88)
        _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", self.fd, 88, ctypes.addressof(info)))
        (self.type, _, self.key_size, self.value_size, self.max_entries,
         self.flags) = struct.unpack_from("6I", info.raw)

    @classmethod
    def by_id(cls, map_id: int) -> Map:
        """A map that is not pinned, by its id (`bpftool map show`)."""
        return cls(f"map id {map_id}", _bpf(BPF_MAP_GET_FD_BY_ID, struct.pack("III", map_id, 0, 0)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lookup(self, key: bytes) -> bytes | None:
        kbuf = ctypes.create_string_buffer(key, self.key_size)
        vbuf = ctypes.create_string_buffer(self.value_size)
        try:
            _bpf(BPF_MAP_LOOKUP_ELEM, struct.pack("IIQQQ", self.fd, 0, ctypes.addressof(kbuf),
                                                  ctypes.addressof(vbuf), 0))
        except FileNotFoundError:
            return None
        return vbuf.raw

    def update(self, key: bytes, value: bytes) -> None:
        if len(value) != self.value_size or len(key) != self.key_size:
            raise ValueError(f"{self.path}: key/value size {len(key)}/{len(value)}, "
                             f"map has {self.key_size}/{self.value_size}")
        kbuf = ctypes.create_string_buffer(key, self.key_size)
        vbuf = ctypes.create_string_buffer(value, self.value_size)
        _bpf(BPF_MAP_UPDATE_ELEM, struct.pack("IIQQQ", self.fd, 0, ctypes.addressof(kbuf),
                                              ctypes.addressof(vbuf), 0))

    def mmap_array(self) -> mmap.mmap:
        """The whole array (BPF_F_MMAPABLE) as shared memory: reads cost no syscall."""
        size = self.value_size * self.max_entries
        size = (size + PAGE - 1) // PAGE * PAGE
        return mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


class RingBuffer:
    """Consumer side of a BPF_MAP_TYPE_RINGBUF map. `fd` is pollable (readable when records
    are waiting); `drain()` returns the payloads of all committed records."""

    BUSY = 1 << 31
    DISCARD = 1 << 30

    def __init__(self, path: str | Map):
        self.map = path if isinstance(path, Map) else Map(path)
        self.fd = self.map.fd
        self.size = self.map.max_entries
        self.consumer = mmap.mmap(self.fd, PAGE, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self.producer = mmap.mmap(self.fd, PAGE + 2 * self.size, mmap.MAP_SHARED,
                                  mmap.PROT_READ, offset=PAGE)

    def drain(self) -> list[bytes]:
        out = []
        cons = struct.unpack_from("Q", self.consumer, 0)[0]
        prod = struct.unpack_from("Q", self.producer, 0)[0]
        while cons < prod:
            off = PAGE + (cons & (self.size - 1))
            hdr_len = struct.unpack_from("I", self.producer, off)[0]
            if hdr_len & self.BUSY:
                break
            length = hdr_len & ~(self.BUSY | self.DISCARD)
            if not hdr_len & self.DISCARD:
                out.append(bytes(self.producer[off + 8:off + 8 + length]))
            cons += (length + 8 + 7) // 8 * 8
            struct.pack_into("Q", self.consumer, 0, cons)
        return out

    def head_busy(self) -> bool:
        """Whether the oldest unread record is reserved but not committed yet (`drain`
        stops there)."""
        cons = struct.unpack_from("Q", self.consumer, 0)[0]
        prod = struct.unpack_from("Q", self.producer, 0)[0]
        if cons >= prod:
            return False
        off = PAGE + (cons & (self.size - 1))
        return bool(struct.unpack_from("I", self.producer, off)[0] & self.BUSY)

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()
        self.map.close()
