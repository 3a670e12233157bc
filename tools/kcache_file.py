"""A kernel-cache file (gen/kcache.c): "XENTKRN2", the key's length (u64), the key (the rendered defines,
then "template=... arch=... nvrtc=..."), four i32 counters, the CUBIN's length (u64), the CUBIN and a
hash of all before it. What tools/same-sass.py and tools/recompile-kernels.py read of it."""
import struct

MAGIC = b"XENTKRN2"


def read(path):
    """(defines text, CUBIN bytes) of a kernel-cache file, or None for any other file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC or len(data) < 16:
        return None
    klen = struct.unpack("<Q", data[8:16])[0]
    key = data[16:16 + klen].decode()
    at = 16 + klen + 16  # past the counters: the CUBIN's length
    size = struct.unpack("<Q", data[at:at + 8])[0]
    return key.split("template=")[0], data[at + 8:at + 8 + size]


def defines(text):
    """{"VEC": 4, ...}: the XENT_ defines of a key's defines text, without their prefix."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("XENT_"):
            out[parts[1][5:]] = int(parts[2])
    return out
