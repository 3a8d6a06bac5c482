#!/usr/bin/env python3
"""Writes dequantization goldens for tests/kernels (test_kernels, "golden" cases).

Rerun (any venv with the gguf package):
    python -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
    /tmp/venv/bin/python tests/golden/make_dequant_goldens.py

Per weight type, tests/golden/dequant/<TYPE>.bin holds seeded random blocks and
gguf.quants.dequantize's float32 output for them:
    char magic[4] = "KXDQ"; u32 version = 1; u32 ggml_type_id; u32 n_elements;
    u32 n_bytes; u8 data[n_bytes]; f32 values[n_elements]      (little-endian)
quant_sizes.txt lists gguf-py's GGML_QUANT_SIZES ("name id block_size
block_bytes" per line), which the test compares with lib/tensor/dtype.cc.
"""
import pathlib
import struct

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

SEED = 20240611
N_ELEMENTS = 64 * 32  # 64 legacy blocks: small files, every nibble/byte value many times
N_ELEMENTS_K = 8 * 256  # 8 K-quant super-blocks (the same element count)
OUT = pathlib.Path(__file__).resolve().parent / "dequant"


def random_halves(rng, n):
    """Finite f16 scales across magnitudes, including subnormals and both signs."""
    mags = np.exp2(rng.uniform(-26, 4, n)).astype(np.float32)
    signs = rng.choice([-1.0, 1.0], n).astype(np.float32)
    return (mags * signs).astype(np.float16)


def blocks_q4_1(rng, nb):
    d = random_halves(rng, nb)
    m = random_halves(rng, nb)
    qs = rng.integers(0, 256, (nb, 16), dtype=np.uint8)
    return np.concatenate([d.view(np.uint8).reshape(nb, 2), m.view(np.uint8).reshape(nb, 2), qs],
                          axis=1)


def blocks_q8_0(rng, nb):
    d = random_halves(rng, nb)
    qs = rng.integers(-128, 128, (nb, 32), dtype=np.int8)  # includes -128 (files may hold it)
    qs[0, 0] = -128
    return np.concatenate([d.view(np.uint8).reshape(nb, 2), qs.view(np.uint8)], axis=1)


def halves(d):
    return d.view(np.uint8).reshape(d.size, 2)


def blocks_q4_0(rng, nb):
    return np.concatenate([halves(random_halves(rng, nb)),
                           rng.integers(0, 256, (nb, 16), dtype=np.uint8)], axis=1)


def blocks_q5_0(rng, nb):
    return np.concatenate([halves(random_halves(rng, nb)),
                           rng.integers(0, 256, (nb, 20), dtype=np.uint8)], axis=1)  # qh, qs


def blocks_q5_1(rng, nb):
    return np.concatenate([halves(random_halves(rng, nb)), halves(random_halves(rng, nb)),
                           rng.integers(0, 256, (nb, 20), dtype=np.uint8)], axis=1)


def blocks_k(rng, nb, block_bytes, half_offsets):
    """K-quant super-blocks: random bytes everywhere (every scale, min and quant
    bit pattern), with finite f16 d / dmin at the given byte offsets."""
    data = rng.integers(0, 256, (nb, block_bytes), dtype=np.uint8)
    for off in half_offsets:
        data[:, off:off + 2] = halves(random_halves(rng, nb))
    return data


def raw_bits(rng, n, width):
    # Every bit pattern class: normals, subnormals, zeros, infinities, NaNs.
    return rng.integers(0, 1 << 16, n, dtype=np.uint16).view(np.uint8) if width == 2 else \
        rng.integers(0, 1 << 32, n, dtype=np.uint32).view(np.uint8)


def main():
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    nb = N_ELEMENTS // 32
    cases = {
        T.Q4_1: blocks_q4_1(rng, nb),
        T.Q8_0: blocks_q8_0(rng, nb),
        T.F16: raw_bits(rng, N_ELEMENTS, 2),
        T.BF16: raw_bits(rng, N_ELEMENTS, 2),
        T.F32: raw_bits(rng, N_ELEMENTS, 4),
        # Issue 3's types, drawn after the first ones so that their files stay as they were.
        T.Q4_0: blocks_q4_0(rng, nb),
        T.Q5_0: blocks_q5_0(rng, nb),
        T.Q5_1: blocks_q5_1(rng, nb),
        # Offsets of d (and dmin) in ggml's block_q*_K.
        T.Q2_K: blocks_k(rng, N_ELEMENTS_K // 256, 84, [80, 82]),
        T.Q3_K: blocks_k(rng, N_ELEMENTS_K // 256, 110, [108]),
        T.Q4_K: blocks_k(rng, N_ELEMENTS_K // 256, 144, [0, 2]),
        T.Q5_K: blocks_k(rng, N_ELEMENTS_K // 256, 176, [0, 2]),
        T.Q6_K: blocks_k(rng, N_ELEMENTS_K // 256, 210, [208]),
    }
    for qtype, data in cases.items():
        block, size = GGML_QUANT_SIZES[qtype]
        data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        assert data.size == N_ELEMENTS // block * size, qtype.name
        with np.errstate(all="ignore"):
            values = quants.dequantize(data.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert values.size == N_ELEMENTS
        header = b"KXDQ" + struct.pack("<4I", 1, int(qtype), N_ELEMENTS, data.size)
        (OUT / f"{qtype.name}.bin").write_bytes(header + data.tobytes() + values.tobytes())
    lines = [f"{t.name} {int(t)} {b} {s}" for t, (b, s) in GGML_QUANT_SIZES.items()]
    (OUT / "quant_sizes.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
