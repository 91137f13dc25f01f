"""PyTorch's side of the bfloat16 safetensors test (tests/core/test_bfloat16.cpp): reads Ember's file, checks
its BF16 tensor against PyTorch's own float32 -> bfloat16 conversion bit for bit, and writes a file of
bfloat16 tensors made by PyTorch for Ember to read. Exits 77 when torch is not installed (skipped).

The file is read and written by hand exactly as the safetensors format (and its Python library)
lays it out: 8-byte little-endian header length, JSON header padded to 8 bytes, raw data.
Usage: safetensors_torch.py EMBER_FILE OUT_FILE
"""
import json
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit(77)

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F64": torch.float64}
NAMES = {v: k for k, v in DTYPES.items()}


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        out[name] = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def save(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    ember = load(sys.argv[1])
    source, rounded = ember["source"], ember["rounded"]
    assert rounded.dtype == torch.bfloat16, rounded.dtype
    mine = source.to(torch.bfloat16)
    same = mine.view(torch.int16) == rounded.view(torch.int16)
    if not bool(same.all()):
        bad = int((~same).nonzero()[0])
        print(f"value {source[bad].item()!r}: Ember {rounded.view(torch.int16)[bad].item():#06x}, "
              f"PyTorch {mine.view(torch.int16)[bad].item():#06x}", file=sys.stderr)
        sys.exit(1)
    # PyTorch's turn: its own bfloat16 of other values, for Ember to read and check.
    gen = torch.Generator().manual_seed(5)
    values = torch.cat([torch.randn(3000, generator=gen) * 1e3, torch.randn(3000, generator=gen) * 1e-30,
                        torch.tensor([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 65504.0, 3.0e38])])
    save(sys.argv[2], {"source": values, "rounded": values.to(torch.bfloat16).reshape(-1)})
    print(f"PyTorch {torch.__version__}: {source.numel()} values of Ember's BF16 tensor match its own rounding")


if __name__ == "__main__":
    main()
