#!/usr/bin/env python3
"""Generate the golden quantization fixtures in tests/data/quant_golden/ with the REAL tools.

What it does
------------
Builds a few small deterministic tensors (fixed seeds; CPU only) and quantizes them with

* NVIDIA ModelOpt   - modelopt.torch.quantization.qtensor.NVFP4QTensor / MXFP4QTensor
                      (quantize + dequantize: the code that produces ModelOpt NVFP4 checkpoints);
* compressed-tensors - generate_gparam, compute_dynamic_scales_and_zp (calculate_qparams) and
                      NVFP4PackedCompressor.compress / .decompress (llm-compressor's NVFP4 path);
* torch itself       - the dtype casts (float8_e4m3fn, float8_e5m2, bfloat16, float16) that every
                      tool relies on, on a list of fp32 edge values (every rounding midpoint).

Besides random tensors with awkward rows (zero blocks, outliers, tiny blocks, ties), the `*_order_*`
cases hold inputs found by searching next to E4M3/E2M1 rounding midpoints, where a reordered but
mathematically equal fp32 formula would round differently; they pin down each tool's exact
operation order (see order_sensitive_blocks).

The W4A4 activation cases follow vLLM's CPU reference `ref_nvfp4_quant` /
`ref_nvfp4_quant_dequant` (vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py).
vLLM itself is not installed (it needs a GPU build), so `vllm_ref_quant` below re-states that
function's operation order with torch ops and uses compressed-tensors' `cast_to_fp4` (the same
thresholds as vLLM's). It is the only fixture not produced end to end by an installed tool.

Output layout (one folder per case)
-----------------------------------
    tests/data/quant_golden/<case>/tensors.safetensors   all tensors, checkpoint-style names
    tests/data/quant_golden/<case>/<name>.<ext>          the same tensors as raw little-endian
                                                         arrays, header-less, row-major
    tests/data/quant_golden/<case>/meta.txt              "key value" lines: shapes, fp32 scalars
                                                         as 0x bit patterns, and the tool versions
Raw extensions: .f32 float32, .bf16 / .f16 uint16 bit patterns, .u8 bytes, .e4m3 E4M3 codes.
The C++ tests (tests/numerics/golden_test.cpp) read only the raw files and meta.txt, so they do
not depend on a safetensors reader; the .safetensors copies are for the formats layer.

Rerun: `python tools/make_quant_fixtures.py` (or `--out DIR`). Output is deterministic for a
given set of tool versions; meta.txt records them. Needs torch, numpy, safetensors,
nvidia-modelopt and compressed-tensors (pip install torch safetensors numpy compressed-tensors
nvidia-modelopt).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

warnings.filterwarnings("ignore")

from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.helpers import (  # noqa: E402
    pack_fp4_to_uint8,
    unpack_fp4_from_uint8,
)
from compressed_tensors.quantization import QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import dequantize as ct_dequantize  # noqa: E402
from compressed_tensors.quantization.quant_scheme import NVFP4 as CT_NVFP4_PRESET  # noqa: E402
from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4 as ct_cast_to_fp4  # noqa: E402
from compressed_tensors.quantization.utils.helpers import (  # noqa: E402
    compute_dynamic_scales_and_zp,
    generate_gparam,
)
from modelopt.torch.quantization.qtensor import MXFP4QTensor, NVFP4QTensor  # noqa: E402

TOOLS = ["torch", "nvidia-modelopt", "compressed-tensors", "safetensors", "numpy"]
VERSIONS = {name: importlib.metadata.version(name) for name in TOOLS}


# ----------------------------------------------------------------------------------------------
# writing

RAW_EXT = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.uint8: "u8",
    torch.float8_e4m3fn: "e4m3",
    torch.float8_e5m2: "e5m2",
}


def f32_hex(x: float) -> str:
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def write_case(root: Path, case: str, tensors: dict[str, torch.Tensor], meta: dict[str, object],
               note: str) -> int:
    out = root / case
    out.mkdir(parents=True)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    # One metadata key: safetensors keeps metadata in a hash map, so several keys would be
    # written in a random order and the file would not be byte-for-byte reproducible.
    tools = ", ".join(f"{k} {v}" for k, v in VERSIONS.items())
    save_file(tensors, str(out / "tensors.safetensors"),
              metadata={"generator": f"tools/make_quant_fixtures.py: {note} ({tools})"})
    lines = [f"# {note}", f"# generated by tools/make_quant_fixtures.py"]
    lines += [f"# {k} {v}" for k, v in VERSIONS.items()]
    for key, value in meta.items():
        if isinstance(value, float):
            lines.append(f"{key} {f32_hex(value)}  # {value!r}")
        else:
            lines.append(f"{key} {value}")
    for name, t in tensors.items():
        ext = RAW_EXT[t.dtype]
        raw = t.view(torch.uint8) if t.element_size() == 1 else t.view(
            torch.int16 if t.element_size() == 2 else torch.int32)
        data = raw.numpy().tobytes()  # little-endian: checked in main()
        (out / f"{name}.{ext}").write_bytes(data)
        lines.append(f"tensor {name}.{ext} {'x'.join(map(str, t.shape)) or 'scalar'}")
    (out / "meta.txt").write_text("\n".join(lines) + "\n")
    return sum(p.stat().st_size for p in out.iterdir())


# ----------------------------------------------------------------------------------------------
# inputs

def nvfp4_mixed_input() -> torch.Tensor:
    """32x128 fp32 covering the awkward cases row by row (8 blocks of 16 per row)."""
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(32, 128, generator=g) * 0.05
    # Row 1 holds the tensor amax 2688, so weight_scale_2 = 2688/2688 = 1 exactly and the
    # tie row below reaches _cast_fp4 unscaled.
    w[1, 5] = 2688.0
    # Row 0: every E2M1 rounding tie (and both signs) in blocks whose amax makes the block
    # scale an exact power of two: block amax 6*2^-j gives scale 2^-j and scaled = w / 2^-j.
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0,
                         -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.0])
    for j in range(8):
        w[0, 16 * j:16 * (j + 1)] = ties * 2.0 ** -j
    w[2, :] = 0.0                                   # all-zero row -> every scale is 1.0
    for j in range(0, 8, 2):
        w[3, 16 * j:16 * (j + 1)] = 0.0             # alternating all-zero blocks
    w[4, :] *= 0.1                                  # block scales in the E4M3 subnormal range
    w[5, :] *= 1e-3                                 # block scales below 2^-9: clamped up to 2^-9
    w[6, :] *= 0.3
    w[7, 0:16] = -0.0                               # negative zeros stay code 0
    w[7, 16:32] = torch.tensor([1e-40, -1e-40, 3e-39, -3e-39] * 4)  # fp32 subnormals
    w[7, 32] = -900.0                               # negative outliers
    w[8, :] = (torch.randn(128, generator=g) ** 3) * 0.05   # heavy tails
    w[9, 40] = 1e3
    return w


def nvfp4_randn_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(42)
    return torch.randn(16, 64, generator=g)


def nvfp4_bf16_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    w = torch.randn(16, 64, generator=g) * 0.02
    w[3, 17] = 0.75
    w[11, 0:16] = 0.0
    return w.to(torch.bfloat16)


# ---- inputs that pin down the fp32 operation order --------------------------------------------
# Two mathematically equal formulas for a scale (say amax / (6*ws2) and amax / 6 / ws2) differ
# in the last fp32 bit now and then, and that only changes the result when the value sits next
# to an E4M3 or E2M1 rounding midpoint. Random data almost never does, so these helpers search
# the fp32 neighbourhood of every midpoint for inputs on which the tool's order and a plausible
# alternative order disagree. The tool itself then quantizes them; a reimplementation with the
# wrong order fails the golden test on these elements.

F32 = np.float32


def neighbours(center: float, n: int) -> np.ndarray:
    bits = int(F32(center).view(np.uint32))
    return np.arange(bits - n, bits + n + 1, dtype=np.int64).astype(np.uint32).view(np.float32)


def e4m3_codes(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.asarray(x, np.float32)).clamp(-448, 448) \
        .to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def e4m3_value(code: int) -> np.float32:
    return F32(torch.tensor([code], dtype=torch.uint8).view(torch.float8_e4m3fn).float().item())


def e2m1_codes(x: np.ndarray) -> np.ndarray:
    return NVFP4QTensor._cast_fp4(torch.from_numpy(np.asarray(x, np.float32)).clone()).numpy()


E4M3_MIDPOINTS = [(e4m3_value(c) + e4m3_value(c + 1)) / 2 for c in range(0x02, 0x7D)]
E2M1_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def order_sensitive_blocks(amax: np.float32, block_scale, scale_alt, elem_true, elem_alt, seed: int,
                           rows: int, cols: int) -> np.ndarray:
    """Rows of 16-element blocks; element 0 of each block is a block amax on which
    block_scale (the tool's order) and scale_alt pick different E4M3 codes; the other elements
    sit where elem_true(w, sf) and elem_alt(w, sf) pick different E2M1 codes. Entry [0, 0] is
    the tensor amax."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, cols), np.float32)
    slots = [(r, b) for r in range(rows) for b in range(cols // 16)][1:]  # block (0,0) holds amax
    mids = iter(rng.permutation(E4M3_MIDPOINTS))
    for r, b in slots:
        for m in mids:
            # invert block_scale approximately: amax_b ~ m * amax / 448
            cand = neighbours(float(m) * float(amax) / 448.0, 96)
            cand = cand[cand < amax]
            differ = cand[e4m3_codes(block_scale(cand)) != e4m3_codes(scale_alt(cand))]
            if len(differ):
                bmax = differ[rng.integers(len(differ))]
                break
        else:
            bmax = F32(rng.uniform(0.1, 0.9) * amax)
        sf = e4m3_value(int(e4m3_codes(block_scale(np.array([bmax])))[0]))
        elems = []
        for t in rng.permutation(E2M1_BOUNDS):
            cand = neighbours(float(elem_true(np.array([F32(t)]), sf, inverse=True)[0]), 256)
            cand = cand[cand < bmax]
            differ = cand[e2m1_codes(elem_true(cand, sf)) != e2m1_codes(elem_alt(cand, sf))]
            elems.extend(differ[:2])
        elems = np.array(elems[:15], np.float32)
        elems *= rng.choice([-1, 1], len(elems)).astype(np.float32)
        block = np.concatenate([[bmax], elems,
                                rng.uniform(-bmax, bmax, 15 - len(elems)).astype(np.float32)])
        x[r, 16 * b:16 * (b + 1)] = block
    x[0, 0] = amax
    x[0, 1:16] = rng.uniform(-amax, amax, 15).astype(np.float32)
    return x


def modelopt_order_input() -> torch.Tensor:
    amax = F32(7.3)
    ws2 = amax / F32(6.0 * 448.0)

    def elem_true(w, sf, inverse=False):   # ModelOpt: w / (sf * ws2)
        return w * (sf * ws2) if inverse else w / (sf * ws2)

    x = order_sensitive_blocks(
        amax, lambda b: b / (F32(6.0) * ws2), lambda b: b / F32(6.0) / ws2,
        elem_true, lambda w, sf: w / sf / ws2, seed=11, rows=16, cols=64)
    return torch.from_numpy(x)


def ct_order_input() -> torch.Tensor:
    amax = F32(7.3)
    g = (F32(1.0) / amax) * F32(2688.0)

    def elem_true(w, sf, inverse=False):   # CT: w / (sf / global)
        return w * (sf / g) if inverse else w / (sf / g)

    x = order_sensitive_blocks(
        amax, lambda b: g * (b / F32(6.0)), lambda b: (g * b) / F32(6.0),
        elem_true, lambda w, sf: (w * g) / sf, seed=12, rows=16, cols=64)
    return torch.from_numpy(x)


def act_order_input(global_scale: float) -> torch.Tensor:
    g = F32(global_scale)
    amax = F32(2688.0) / g          # the calibrated amax: block scales stay <= 448

    def elem_true(w, sf, inverse=False):   # vLLM: x * (1 / (sf * (1/g)))
        out_scale = F32(1.0) / (sf * (F32(1.0) / g))
        return w / out_scale if inverse else w * out_scale

    x = order_sensitive_blocks(
        amax, lambda b: g * (b * F32(1 / 6.0)), lambda b: g * (b / F32(6.0)),
        elem_true, lambda w, sf: (w * g) / sf, seed=13, rows=16, cols=64)
    return torch.from_numpy(x)


def act_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(99)
    x = torch.randn(16, 64, generator=g) * 2.0
    x[1, :] = 0.0                   # zero row: block scale 0, reciprocal guard path
    x[2, 16:32] = 0.0
    x[3, :] *= 1e-4                 # tiny blocks -> scale rounds to E4M3 subnormal / zero
    x[4, :] *= 30.0                 # beyond the calibrated amax -> scale clamps at 448, x at 6
    x[5, 7] = -50.0
    return x


def mxfp4_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 64, generator=g)
    x[1, 0:32] = 0.0                # amax 0 -> e8m0 code 0 (2^-127)
    x[2, 0:32] *= 1e-30             # low exponents
    x[2, 32:64] *= 1e20
    x[3, :] *= 1e-3
    return x


def scalar_inputs() -> np.ndarray:
    """fp32 values that pin down every rounding decision of the narrow formats."""
    vals: list[float] = []

    def with_neighbours(v: float) -> None:
        f = np.float32(v)
        for x in (f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))):
            vals.extend([float(x), -float(x)])

    def all_values(decode, codes) -> list[float]:
        return sorted({decode(c) for c in codes})

    e4m3 = all_values(lambda c: float(torch.tensor([c], dtype=torch.uint8).view(torch.float8_e4m3fn)
                                      .float()), range(0x7F))
    e5m2 = all_values(lambda c: float(torch.tensor([c], dtype=torch.uint8).view(torch.float8_e5m2)
                                      .float()), range(0x7C))
    for table in (e4m3, e5m2):
        for a, b in zip(table, table[1:]):
            with_neighbours(a)
            with_neighbours((a + b) / 2)            # midpoints are exact in fp32
    for v in (448.0, 464.0, 480.0, 500.0, 57344.0, 61440.0, 65536.0, 65504.0, 65520.0,
              2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -16, 2.0 ** -17, 2.0 ** -24, 2.0 ** -25,
              3 * 2.0 ** -26, 1e-40, 1.17549435e-38, 3.4028235e38, 1e30):
        with_neighbours(v)
    # E2M1: bounds, values, and the region past 6
    for v in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 7.0, 100.0):
        with_neighbours(v)
    # FP16 subnormal/normal boundaries and a sample of midpoints over the whole range
    rng = np.random.default_rng(2024)
    half_codes = np.concatenate([np.arange(0, 64), np.arange(0x3FE, 0x404),
                                 rng.integers(0, 0x7BFF, 300), np.arange(0x7BF8, 0x7BFF)])
    for c in half_codes:
        a = float(np.array([c], np.uint16).view(np.float16)[0])
        b = float(np.array([c + 1], np.uint16).view(np.float16)[0])
        with_neighbours((a + b) / 2)
    # BF16 ties: low 16 bits exactly 0x8000, with odd and even kept parts
    tie_bits = (rng.integers(0, 0x7F7F, 300, dtype=np.uint32) << 16) | 0x8000
    for v in tie_bits.view(np.float32):
        with_neighbours(float(v))
    specials = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                         0x7FA00001, 0x00000001, 0x7F7FFFFF], np.uint32).view(np.float32)
    random_bits = rng.integers(0, 2 ** 32, 1500, dtype=np.uint64).astype(np.uint32).view(np.float32)
    log_uniform = (2.0 ** rng.uniform(-12, 10, 1500) * rng.choice([-1, 1], 1500)).astype(np.float32)
    out = np.concatenate([np.array(vals, np.float32), specials, random_bits, log_uniform])
    # Deduplicate by bit pattern, keep a stable order.
    _, first = np.unique(out.view(np.uint32), return_index=True)
    out = out[np.sort(first)]
    if len(out) % 2:
        out = out[:-1]
    return out


# ----------------------------------------------------------------------------------------------
# tool wrappers

def modelopt_nvfp4(w: torch.Tensor, ws2: torch.Tensor | None = None):
    qt, scale, ws2_out = NVFP4QTensor.quantize(w, 16, weights_scaling_factor_2=ws2)
    kw = {"scale": scale, "double_scale": ws2_out, "block_sizes": {-1: 16}}
    deq_f32 = qt.dequantize(dtype=torch.float32, **kw)
    deq_bf16 = qt.dequantize(dtype=torch.bfloat16, **kw)
    return qt._quantized_data, scale, ws2_out.float().reshape([]), deq_f32, deq_bf16


def ct_scheme() -> QuantizationScheme:
    return QuantizationScheme(targets=["Linear"], **CT_NVFP4_PRESET)


def ct_nvfp4(w: torch.Tensor):
    """The llm-compressor flow: global scale from min/max, per-group qparams, compress."""
    scheme = ct_scheme()
    global_scale = generate_gparam(w.min(), w.max())                 # 2688 / amax, F32 [1]
    scale, _ = compute_dynamic_scales_and_zp(w, scheme.weights, module=None,
                                             global_scale=global_scale)
    compressed = NVFP4PackedCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_global_scale": global_scale}, scheme)
    packed, scale_fp8 = compressed["weight_packed"], compressed["weight_scale"]
    decompressed = NVFP4PackedCompressor.decompress(dict(compressed), scheme)["weight"]  # bf16
    m, n = packed.shape
    deq_f32 = ct_dequantize(x_q=unpack_fp4_from_uint8(packed, m, 2 * n, dtype=torch.float32),
                            scale=scale_fp8.to(torch.float32), args=scheme.weights,
                            global_scale=global_scale, dtype=torch.float32)
    return packed, scale_fp8, global_scale, deq_f32, decompressed


def vllm_ref_quant(x: torch.Tensor, global_scale: torch.Tensor, block: int = 16):
    """vLLM ref_nvfp4_quant + the CPU branch of ref_nvfp4_quant_dequant, same op order."""
    def get_reciprocal(t: torch.Tensor) -> torch.Tensor:
        return 1.0 / (t + (t == 0) * 1e8)          # vLLM's graph-capture-safe reciprocal

    m, n = x.shape
    xb = x.reshape(m, n // block, block)
    vec_max = torch.max(torch.abs(xb), dim=-1, keepdim=True)[0].to(torch.float32)
    scale = global_scale * (vec_max * (1 / 6.0))    # FLOAT4_E2M1_MAX_RECIPROCAL
    scale = torch.clamp(scale, max=448, min=-448)
    scale = scale.to(torch.float8_e4m3fn).to(torch.float32)
    output_scale = get_reciprocal(scale * get_reciprocal(global_scale))
    scaled_x = xb.to(torch.float32) * output_scale
    clipped = torch.clamp(scaled_x, -6.0, 6.0).reshape(m, n)
    x_fp4 = ct_cast_to_fp4(clipped)                 # same thresholds as vLLM's cast_to_fp4
    x_scale = scale.squeeze(-1)
    # ref_nvfp4_quant_dequant (CPU): x_fp4 * (blockscale / global_scale)
    deq = (x_fp4.reshape(m, n // block, block) * (x_scale.unsqueeze(-1) / global_scale)).reshape(m, n)
    return x_fp4, x_scale, deq


# ----------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent.parent / "tests/data/quant_golden")
    args = ap.parse_args()
    assert sys.byteorder == "little", "raw fixtures are written in native (little-endian) order"
    torch.manual_seed(0)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    total = 0

    # ---- NVFP4 weights, ModelOpt and compressed-tensors on the same inputs ----
    weight_cases = {
        "mixed": (nvfp4_mixed_input(), "32x128 fp32: ties, zero blocks, outliers, E4M3-subnormal "
                                        "and clamped block scales, fp32 subnormals, -0.0"),
        "randn": (nvfp4_randn_input(), "16x64 fp32 standard normal"),
        "bf16": (nvfp4_bf16_input(), "16x64 bf16 weights (typical 0.02 std) fed to the tools as bf16"),
    }
    for name, (w, what) in weight_cases.items():
        rows, cols = w.shape
        packed, scale, ws2, deq, deq_bf16 = modelopt_nvfp4(w)
        total += write_case(args.out, f"nvfp4_{name}_modelopt", {
            "input": w, "weight": packed, "weight_scale": scale, "weight_scale_2": ws2,
            "dequant": deq, "dequant_bf16": deq_bf16,
        }, {"rows": rows, "cols": cols, "weight_scale_2": ws2.item(), "ws2_from_amax": 1},
            f"ModelOpt NVFP4QTensor.quantize/dequantize of {what}")

        w32 = w.float()
        ct_packed, ct_scale, gs, ct_deq, ct_deq_bf16 = ct_nvfp4(w32)
        total += write_case(args.out, f"nvfp4_{name}_ct", {
            "input": w, "weight_packed": ct_packed, "weight_scale": ct_scale,
            "weight_global_scale": gs, "dequant": ct_deq, "dequant_bf16": ct_deq_bf16,
        }, {"rows": rows, "cols": cols, "weight_global_scale": gs.item()},
            f"compressed-tensors NVFP4 (generate_gparam, calculate_qparams, "
            f"NVFP4PackedCompressor) of {what} (bf16 inputs are given to CT as fp32)")
        print(f"nvfp4_{name}: modelopt vs CT on the same input: "
              f"{int((packed != ct_packed).sum())}/{packed.numel()} packed bytes differ, "
              f"{int((scale.view(torch.uint8) != ct_scale.view(torch.uint8)).sum())}/{scale.numel()} "
              f"scale codes differ; ws2={ws2.item()!r} 1/global={1 / gs.item()!r}")

    # ---- inputs that pin down the operation order (see order_sensitive_blocks) ----
    w = modelopt_order_input()
    packed, scale, ws2, deq, deq_bf16 = modelopt_nvfp4(w)
    total += write_case(args.out, "nvfp4_order_modelopt", {
        "input": w, "weight": packed, "weight_scale": scale, "weight_scale_2": ws2,
        "dequant": deq, "dequant_bf16": deq_bf16,
    }, {"rows": 16, "cols": 64, "weight_scale_2": ws2.item(), "ws2_from_amax": 1},
        "ModelOpt NVFP4QTensor on 16x64 fp32 next to E4M3/E2M1 midpoints where "
        "amax/(6*ws2) vs amax/6/ws2 and w/(sf*ws2) vs w/sf/ws2 round differently")
    w = ct_order_input()
    ct_packed, ct_scale, gs, ct_deq, ct_deq_bf16 = ct_nvfp4(w)
    total += write_case(args.out, "nvfp4_order_ct", {
        "input": w, "weight_packed": ct_packed, "weight_scale": ct_scale,
        "weight_global_scale": gs, "dequant": ct_deq, "dequant_bf16": ct_deq_bf16,
    }, {"rows": 16, "cols": 64, "weight_global_scale": gs.item()},
        "compressed-tensors NVFP4 on 16x64 fp32 next to E4M3/E2M1 midpoints where "
        "g*(amax/6) vs (g*amax)/6 and w/(sf/g) vs (w*g)/sf round differently")

    # ---- ModelOpt with an externally given weight_scale_2 (fused q/k/v, gate/up share one) ----
    w = nvfp4_randn_input()[:8]
    own = w.abs().max() / 2688.0
    for name, factor, what in (("shared_ws2", 3.0, "ws2 = 3x own (a sibling has the larger amax)"),
                               ("small_ws2", 0.5, "ws2 = 0.5x own: block scales clamp at 448, "
                                                  "elements saturate at 6")):
        ws2_in = (own * factor).float()
        packed, scale, ws2, deq, deq_bf16 = modelopt_nvfp4(w, ws2_in)
        total += write_case(args.out, f"nvfp4_{name}_modelopt", {
            "input": w, "weight": packed, "weight_scale": scale, "weight_scale_2": ws2,
            "dequant": deq, "dequant_bf16": deq_bf16,
        }, {"rows": 8, "cols": 64, "weight_scale_2": ws2.item(), "ws2_from_amax": 0},
            f"ModelOpt NVFP4QTensor.quantize(weights_scaling_factor_2=...) on 8x64 randn, {what}")

    # ---- W4A4 activations, vLLM reference ----
    x = act_input()
    input_scale = (x[0:1].abs().max() * 2.0 / 2688.0).float()    # static calibration (ModelOpt)
    global_scale = (1.0 / input_scale).reshape([1])               # what vLLM passes: 1/input_scale
    x_fp4, x_scale, x_deq = vllm_ref_quant(x, global_scale)
    total += write_case(args.out, "nvfp4_act_vllm", {
        "input": x, "input_global_scale": global_scale, "x_fp4": x_fp4,
        "x_scale": x_scale.to(torch.float8_e4m3fn), "dequant": x_deq,
    }, {"rows": 16, "cols": 64, "input_global_scale": global_scale.item()},
        "vLLM ref_nvfp4_quant/_dequant (CPU reference, op order restated, CT cast_to_fp4) "
        "on 16x64 fp32 activations: zero row/block, tiny blocks, blocks past the calibrated amax")

    x = act_order_input(global_scale.item())
    x_fp4, x_scale, x_deq = vllm_ref_quant(x, global_scale)
    total += write_case(args.out, "nvfp4_act_order_vllm", {
        "input": x, "input_global_scale": global_scale, "x_fp4": x_fp4,
        "x_scale": x_scale.to(torch.float8_e4m3fn), "dequant": x_deq,
    }, {"rows": 16, "cols": 64, "input_global_scale": global_scale.item()},
        "vLLM ref_nvfp4_quant/_dequant on 16x64 fp32 next to E4M3/E2M1 midpoints where "
        "g*(vmax*(1/6)) vs g*(vmax/6) and x*(1/(sf*(1/g))) vs (x*g)/sf round differently")

    # ---- MXFP4, ModelOpt ----
    x = mxfp4_input()
    qt, e8m0 = MXFP4QTensor.quantize(x, 32)
    deq = qt.dequantize(dtype=torch.float32, scale=e8m0, block_sizes={-1: 32})
    total += write_case(args.out, "mxfp4_modelopt", {
        "input": x, "blocks": qt._quantized_data, "scales": e8m0.reshape(8, 2), "dequant": deq,
    }, {"rows": 8, "cols": 64}, "ModelOpt MXFP4QTensor.quantize/dequantize of 8x64 fp32 "
                                 "(zero block, 1e-30 and 1e20 blocks)")

    # ---- scalar casts, torch and the tools' E2M1 rounding ----
    v = torch.from_numpy(scalar_inputs())
    mo_e2m1 = NVFP4QTensor._cast_fp4(v.clone())
    ct_vals = ct_cast_to_fp4(torch.clamp(v.clone(), -6.0, 6.0))   # as round_to_quantized_type_args
    ct_packed = pack_fp4_to_uint8(ct_vals.reshape(-1, 2)).reshape(-1)
    ct_e2m1 = torch.stack([ct_packed & 0x0F, ct_packed >> 4], dim=1).reshape(-1)  # low nibble first
    total += write_case(args.out, "scalar_casts", {
        "input": v,
        "e4m3": v.to(torch.float8_e4m3fn).view(torch.uint8),
        "e4m3_clamped": torch.clamp(v, -448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8),
        "e5m2": v.to(torch.float8_e5m2).view(torch.uint8),
        "bf16": v.to(torch.bfloat16), "f16": v.to(torch.float16),
        "e2m1_modelopt": mo_e2m1, "e2m1_ct": ct_e2m1.to(torch.uint8),
        # torch's decoding of every E4M3 / E5M2 code
        "e4m3_decode": torch.arange(256, dtype=torch.int32).to(torch.uint8)
                       .view(torch.float8_e4m3fn).to(torch.float32),
        "e5m2_decode": torch.arange(256, dtype=torch.int32).to(torch.uint8)
                       .view(torch.float8_e5m2).to(torch.float32),
    }, {"count": v.numel()}, "torch casts of fp32 edge values; ModelOpt _cast_fp4 codes; "
                             "compressed-tensors cast_to_fp4 + pack_fp4_to_uint8 codes; "
                             "torch decoding of all 256 E4M3 and E5M2 codes")

    # ---- tensor scales from amax: ModelOpt weight_scale_2 and compressed-tensors global ----
    rng = np.random.default_rng(77)
    amaxes = np.concatenate([
        np.float32(2.0) ** rng.uniform(-30, 30, 1000).astype(np.float32),
        np.array([1.0, 3.0, 6.0, 448.0, 2688.0, 1e-38, 1e-45, 0.0], np.float32)]).astype(np.float32)
    ws2s, globals_ = [], []
    for a in amaxes:
        t = torch.tensor([a, -a], dtype=torch.float32)
        ws2s.append(NVFP4QTensor.get_weights_scaling_factor_2(t).float().reshape([]))
        globals_.append(generate_gparam(t.min(), t.max()).reshape([]))
    total += write_case(args.out, "global_scales", {
        "amax": torch.from_numpy(amaxes), "weight_scale_2": torch.stack(ws2s),
        "weight_global_scale": torch.stack(globals_),
    }, {"count": len(amaxes)}, "ModelOpt get_weights_scaling_factor_2 and compressed-tensors "
                               "generate_gparam for log-uniform amax values plus edge cases")

    print(f"wrote {args.out} ({total} bytes)")


if __name__ == "__main__":
    main()
