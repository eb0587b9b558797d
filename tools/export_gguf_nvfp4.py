#!/usr/bin/env python3
"""Write a ModelOpt NVFP4 Qwen3-MoE / Qwen3 checkpoint (e.g. from `fp4serve synth`) as a GGUF
with NVFP4 tensors, so llama.cpp runs the same weights as fp4serve (docs/perf.md).

    tools/export_gguf_nvfp4.py CHECKPOINT_DIR OUT.gguf [--gguf-py DIR]

Needs numpy and llama.cpp's gguf-py (pure Python; it comes with the llama-cpp-python sdist that
tools/build_llama_bench.sh unpacks). No torch: safetensors are read with numpy memmaps, and the
file is streamed tensor by tensor, so a 17 GB checkpoint needs ~1 GB of memory.

The layout follows llama.cpp's NVFP4 type (ggml-common.h `block_nvfp4`, 36 bytes per 64 weights:
4 UE4M3 sub-block scales, then 32 bytes where, per 16-element sub-block s, byte 8s+j holds
element j in its low nibble and element j+8 in its high nibble). ModelOpt packs consecutive
pairs (low nibble = element 2j), so the nibbles are re-ordered; the E4M3 block scales keep their
bits (a positive E4M3 code is the same UE4M3 code). weight_scale_2 becomes `<tensor>.scale`
(shape [1], or [n_expert] for the stacked expert tensors). input_scale is not exported: both
engines run W4A16-style here (fp4serve fp32 activations, llama.cpp Q8_0 activations).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import struct
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:  # a fresh machine's python: say what to install, not a traceback
    sys.exit("export_gguf_nvfp4: needs numpy (and PyYAML for llama.cpp's gguf-py): pip install numpy pyyaml, "
             "or let tools/compare_llama_cpp.py make its own venv")


class Fail(Exception):
    pass


# ---- safetensors, read-only, no torch -----------------------------------------------------------

_NP = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8, "F8_E4M3": np.uint8, "I8": np.int8}


class Checkpoint:
    def __init__(self, root: Path):
        self.root = root
        files = sorted(root.glob("*.safetensors"))
        if not files:
            raise Fail(f"{root}: no *.safetensors files")
        self.entries: dict[str, tuple[Path, str, list[int], int, int]] = {}
        self.maps: dict[Path, np.memmap] = {}
        for f in files:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            for name, e in header.items():
                if name == "__metadata__":
                    continue
                b, end = e["data_offsets"]
                self.entries[name] = (f, e["dtype"], list(e["shape"]), 8 + n + b, end - b)

    def has(self, name: str) -> bool:
        return name in self.entries

    def get(self, name: str) -> np.ndarray:
        if name not in self.entries:
            raise Fail(f"{self.root}: tensor {name} is missing")
        f, dtype, shape, offset, nbytes = self.entries[name]
        if dtype not in _NP:
            raise Fail(f"{f.name}: tensor {name} has dtype {dtype}, which this exporter does not handle")
        if f not in self.maps:
            self.maps[f] = np.memmap(f, dtype=np.uint8, mode="r")
        raw = self.maps[f][offset:offset + nbytes]
        return raw.view(_NP[dtype]).reshape(shape)

    def dtype(self, name: str) -> str:
        return self.entries[name][1]


# ---- NVFP4 repacking -----------------------------------------------------------------------------

def nvfp4_to_ggml(name: str, packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """ModelOpt [N, K/2] codes + [N, K/16] E4M3 scales -> [N, K/64 * 36] ggml block_nvfp4 bytes."""
    n, half_k = packed.shape
    k = half_k * 2
    if k % 64 != 0:
        raise Fail(f"{name}: K = {k} is not a multiple of 64 (llama.cpp's NVFP4 super-block)")
    if scales.shape != (n, k // 16):
        raise Fail(f"{name}: weight_scale has shape {list(scales.shape)}, expected [{n}, {k // 16}]")
    if np.any((scales & 0x80) != 0):
        raise Fail(f"{name}: negative E4M3 block scales cannot be stored as llama.cpp's unsigned UE4M3")
    blocks = k // 16
    w = np.asarray(packed).reshape(n, blocks, 8)
    vals = np.empty((n, blocks, 16), dtype=np.uint8)
    vals[:, :, 0::2] = w & 0x0F  # ModelOpt: element 2j in the low nibble of byte j
    vals[:, :, 1::2] = w >> 4
    qs = vals[:, :, :8] | (vals[:, :, 8:] << 4)  # ggml: element j low, element j + 8 high
    supers = blocks // 4
    out = np.empty((n, supers, 36), dtype=np.uint8)
    out[:, :, :4] = np.asarray(scales).reshape(n, supers, 4)
    out[:, :, 4:] = qs.reshape(n, supers, 32)
    return out.reshape(n, supers * 36)


# ---- the plan: every GGUF tensor, how to produce it --------------------------------------------

class Plan:
    """Every GGUF tensor in file order: its name, shape and numpy dtype (known before any data is
    converted, so the header can be written first), and a function producing its data."""

    def __init__(self):
        self.items: list[tuple[str, tuple, np.dtype, object, object]] = []

    def add(self, name, shape, dtype, producer, raw_dtype=None):
        self.items.append((name, tuple(shape), np.dtype(dtype), producer, raw_dtype))


def nvfp4_shape(ck: Checkpoint, prefix: str) -> tuple[int, int]:
    n, half_k = ck.get(prefix + ".weight").shape
    return n, half_k * 2 // 64 * 36


def is_nvfp4(ck: Checkpoint, prefix: str) -> bool:
    return ck.has(prefix + ".weight_scale") and ck.dtype(prefix + ".weight") == "U8"


def scale2(ck: Checkpoint, prefix: str) -> float:
    name = prefix + ".weight_scale_2"
    return float(np.asarray(ck.get(name), dtype=np.float32).reshape(-1)[0]) if ck.has(name) else 1.0


def plan_linear(plan: Plan, ck: Checkpoint, gguf, src: str, dst: str, force_f32: bool = False):
    if is_nvfp4(ck, src):
        plan.add(dst + ".weight", nvfp4_shape(ck, src), np.uint8,
                 lambda: nvfp4_to_ggml(src, ck.get(src + ".weight"), ck.get(src + ".weight_scale")),
                 gguf.GGMLQuantizationType.NVFP4)
        plan.add(dst + ".scale", (1,), np.float32, lambda: np.array([scale2(ck, src)], dtype=np.float32))
    else:
        plan_plain(plan, ck, gguf, src + ".weight", dst + ".weight", force_f32)


def plan_plain(plan: Plan, ck: Checkpoint, gguf, src: str, dst: str, force_f32: bool = False):
    dtype = ck.dtype(src)
    shape = ck.get(src).shape
    if force_f32 or dtype == "F32":
        plan.add(dst, shape, np.float32, lambda: to_f32(ck.get(src), dtype))
    elif dtype == "BF16":
        plan.add(dst, shape, np.uint16, lambda: np.asarray(ck.get(src)), gguf.GGMLQuantizationType.BF16)
    elif dtype == "F16":
        plan.add(dst, shape, np.float16, lambda: np.asarray(ck.get(src)))
    else:
        raise Fail(f"{src}: dtype {dtype} is not exported (only NVFP4, BF16, F16, F32)")


def to_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (np.asarray(a).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(a, dtype=np.float32)


def plan_experts(plan: Plan, ck: Checkpoint, gguf, layer: int, experts: int):
    for proj, dst in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
        prefixes = [f"model.layers.{layer}.mlp.experts.{e}.{proj}" for e in range(experts)]
        if not all(is_nvfp4(ck, p) for p in prefixes):
            raise Fail(f"layer {layer} {proj}: every expert must be NVFP4 for this exporter")
        name = f"blk.{layer}.{dst}"
        plan.add(name + ".weight", (experts, *nvfp4_shape(ck, prefixes[0])), np.uint8,
                 lambda prefixes=prefixes: np.stack([nvfp4_to_ggml(p, ck.get(p + ".weight"), ck.get(p + ".weight_scale"))
                                                     for p in prefixes]),
                 gguf.GGMLQuantizationType.NVFP4)
        plan.add(name + ".scale", (experts,), np.float32, lambda prefixes=prefixes: np.array([scale2(ck, p) for p in prefixes], dtype=np.float32))


def build_plan(ck: Checkpoint, cfg: dict, gguf) -> Plan:
    plan = Plan()
    plan_plain(plan, ck, gguf, "model.embed_tokens.weight", "token_embd.weight")
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        plan_plain(plan, ck, gguf, p + ".input_layernorm.weight", f"blk.{i}.attn_norm.weight", True)
        for src, dst in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            plan_linear(plan, ck, gguf, f"{p}.self_attn.{src}", f"blk.{i}.{dst}")
        plan_plain(plan, ck, gguf, p + ".self_attn.q_norm.weight", f"blk.{i}.attn_q_norm.weight", True)
        plan_plain(plan, ck, gguf, p + ".self_attn.k_norm.weight", f"blk.{i}.attn_k_norm.weight", True)
        plan_plain(plan, ck, gguf, p + ".post_attention_layernorm.weight", f"blk.{i}.ffn_norm.weight", True)
        if cfg["model_type"] == "qwen3_moe":
            plan_plain(plan, ck, gguf, p + ".mlp.gate.weight", f"blk.{i}.ffn_gate_inp.weight", True)
            plan_experts(plan, ck, gguf, i, cfg["num_experts"])
        else:
            for src, dst in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                plan_linear(plan, ck, gguf, f"{p}.mlp.{src}", f"blk.{i}.{dst}")
    plan_plain(plan, ck, gguf, "model.norm.weight", "output_norm.weight", True)
    if ck.has("lm_head.weight") and not cfg.get("tie_word_embeddings", False):
        plan_linear(plan, ck, gguf, "lm_head", "output")
    return plan


# ---- metadata ------------------------------------------------------------------------------------

def add_vocab(writer, gguf, root: Path, vocab_size: int):
    path = root / "tokenizer.json"
    if not path.is_file():
        raise Fail(f"{root}: no tokenizer.json (llama.cpp needs a vocabulary; run synth without --no-tokenizer)")
    tok = json.loads(path.read_text(encoding="utf-8"))
    ids: dict[int, tuple[str, int]] = {}
    for text, i in tok["model"]["vocab"].items():
        ids[i] = (text, gguf.TokenType.NORMAL)
    for added in tok.get("added_tokens", []):
        ids[added["id"]] = (added["content"], gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED)
    if max(ids) >= vocab_size:
        raise Fail(f"{path}: token id {max(ids)} does not fit vocab_size {vocab_size} of config.json")
    tokens, types = [], []
    for i in range(vocab_size):
        text, kind = ids.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED))
        tokens.append(text)
        types.append(kind)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(root, load_merges=True, n_vocab=vocab_size).add_to_gguf(writer)


def add_hparams(writer, gguf, cfg: dict):
    writer.add_name(f"fp4serve export of {cfg['model_type']}")
    writer.add_context_length(cfg.get("max_position_embeddings", 4096))
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg.get("intermediate_size", 0))
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 1e6)))
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    if cfg["model_type"] == "qwen3_moe":
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_NVFP4)
    writer.add_quantization_version(getattr(gguf, "GGML_QUANT_VERSION", 2))


def find_gguf_py(explicit: str | None) -> str:
    candidates = [explicit] if explicit else sorted(glob.glob("/tmp/fp4serve-llama/llama_cpp_python-*/vendor/llama.cpp/gguf-py"))
    for c in candidates:
        if c and (Path(c) / "gguf" / "__init__.py").is_file():
            return c
    raise Fail("llama.cpp's gguf-py not found: run tools/build_llama_bench.sh first, or pass --gguf-py DIR")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py directory (default: the one tools/build_llama_bench.sh unpacked)")
    args = ap.parse_args()
    try:
        sys.path.insert(0, find_gguf_py(args.gguf_py))
        import gguf  # noqa: E402  (from llama.cpp; not a dependency of fp4serve)

        if not hasattr(gguf.GGMLQuantizationType, "NVFP4"):
            raise Fail(f"{gguf.__file__}: this gguf-py has no NVFP4 type (llama.cpp too old)")
        cfg_path = args.checkpoint / "config.json"
        if not cfg_path.is_file():
            raise Fail(f"{args.checkpoint}: no config.json")
        cfg = json.loads(cfg_path.read_text())
        arch = {"qwen3_moe": "qwen3moe", "qwen3": "qwen3"}.get(cfg.get("model_type"))
        if arch is None:
            raise Fail(f"{cfg_path}: model_type {cfg.get('model_type')!r} is not exported (qwen3_moe, qwen3)")
        ck = Checkpoint(args.checkpoint)
        plan = build_plan(ck, cfg, gguf)

        # The header (with every tensor's shape) first, then the data streamed tensor by tensor.
        writer = gguf.GGUFWriter(str(args.out), arch)
        add_hparams(writer, gguf, cfg)
        add_vocab(writer, gguf, args.checkpoint, cfg["vocab_size"])
        for name, shape, dtype, _, raw in plan.items:
            writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total = 0
        for name, shape, dtype, produce, _ in plan.items:
            a = np.ascontiguousarray(produce())
            if a.shape != shape or a.dtype != dtype:
                raise Fail(f"{name}: produced {a.dtype}{list(a.shape)}, planned {dtype}{list(shape)}")
            writer.write_tensor_data(a)
            total += a.nbytes
        writer.close()
        print(f"wrote {len(plan.items)} tensors ({total / 2**30:.2f} GiB) to {args.out}", file=sys.stderr)
        return 0
    except Fail as e:
        print(f"error: {e}", file=sys.stderr)
        if args.out.exists():
            os.unlink(args.out)
        return 1


if __name__ == "__main__":
    sys.exit(main())
