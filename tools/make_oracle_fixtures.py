#!/usr/bin/env python3
"""Generate the model oracle fixtures in tests/data/oracle/ with Hugging Face transformers.

What it does
------------
For each fixture below it builds a tiny random Qwen3-MoE (or dense Qwen3) with transformers,
saves it as a checkpoint the engine loads, and records what transformers computes on it:

* the logits (fp32) at every position of a prompt followed by its greedy continuation
  (GREEDY_STEPS tokens, each chosen by argmax of the full forward of everything before it);
* the greedy token ids and their text, decoded by a tiny byte-level tokenizer (one token per
  byte, ids 0..255, built with the `tokenizers` library), so `fp4serve run` can print text
  and needs no Qwen tokenizer.

Checkpoint kinds
----------------
* BF16: the random fp32 weights are rounded to bf16 first, so the saved checkpoint holds exactly
  the weights transformers ran with; the reference runs in fp32 on those weights.
* NVFP4, ModelOpt: the BF16 model is quantized with the real tool, `mtq.quantize(model,
  mtq.NVFP4_DEFAULT_CFG, calibrate)` (every Linear but the router and lm_head, W4A4 with static
  input scales calibrated on the fixture's sequence), and written with `export_hf_checkpoint`
  (hf_quant_config.json + U8 weights, F8_E4M3 block scales, F32 weight_scale_2 / input_scale).
* NVFP4, compressed-tensors: the ModelOpt export converted with compressed-tensors' own
  `convert_checkpoint(..., ModelOptNvfp4Converter)` (weight_packed, inverted global scales).
* FP8, ModelOpt: `mtq.FP8_DEFAULT_CFG` and the same export (F8_E4M3 weights, F32 per-tensor
  weight_scale and input_scale); the reference uses fp8 * weight_scale in fp32, fp32 activations.

For NVFP4 the reference is transformers (fp32) on the weights dequantized by the producing tool
(ModelOpt NVFP4QTensor.dequantize / compressed-tensors' dequantize), which is what W4A16 means.
The W4A4 reference additionally fake-quantizes the input of every quantized Linear (and of each
routed expert's gate/up and down projections) exactly as vLLM's CPU emulation does,
ref_nvfp4_quant_dequant(x, 1 / input_scale), before the matrix product.

Robustness: a fixture is only accepted when the argmax of every generated step wins by a clear
margin and no MoE top-k choice is a near-tie (see MIN_* below), so the C++ engine, whose fp32
arithmetic differs from torch's only in rounding order, must reproduce every token; seeds are
tried in order until a model passes, and the margins reached are recorded in oracle.json.

Output (one folder per fixture; config.json, model.safetensors, [hf_quant_config.json],
tokenizer.json as a checkpoint, plus):
    oracle.json           prompt, greedy ids and text per variant, margins, tool versions
    oracle.safetensors    "<variant>.logits" F32 [positions, vocab], "<variant>.ids" I64 [positions]
Variants: "default" (BF16: fp32 activations; NVFP4: W4A16) and "w4a4" (NVFP4 ModelOpt only).

Rerun: `python tools/make_oracle_fixtures.py` (or `--out DIR`, `--only NAME`). Needs torch,
transformers, tokenizers, safetensors, nvidia-modelopt and compressed-tensors; CPU only.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

warnings.filterwarnings("ignore")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

TOOLS = ["torch", "transformers", "tokenizers", "safetensors", "nvidia-modelopt", "compressed-tensors"]
VERSIONS = {name: importlib.metadata.version(name) for name in TOOLS}

VOCAB = 256          # one token per byte
PROMPT = "Hello, fp4serve!"
GREEDY_STEPS = 32
# Acceptance margins (see the module docstring). The C++ tests compare logits with a relative
# tolerance of 1e-4 of the row's largest |logit|; a greedy step must win by 10x that.
MIN_GREEDY_MARGIN = 1e-3   # (top1 - top2) / max|logit| at every generated step
MIN_ROUTER_MARGIN = 1e-4   # p_k - p_{k+1} of the sorted router probabilities, every token and layer
MIN_DISTINCT = 8           # distinct tokens in the greedy continuation (random models love loops)
# The MoE router modules of every architecture the fixture scripts build (transformers v5 names);
# tools/make_hybrid_oracle_fixtures.py shares RouterMargins and greedy_oracle with this script.
ROUTER_TYPES = ("Qwen3MoeTopKRouter", "Qwen3_5MoeTopKRouter", "Qwen3NextTopKRouter")


# ----------------------------------------------------------------------------------------------
# fixtures

@dataclass
class Fixture:
    name: str
    description: str
    arch: str                     # "qwen3_moe" or "qwen3"
    config: dict
    quant: str = "bf16"           # "bf16", "modelopt" (NVFP4, W4A16 + W4A4), "ct" (NVFP4, W4A16),
                                  # "modelopt_fp8" (FP8 per tensor, fp32 activations)
    base: str | None = None       # quantized fixtures: the BF16 fixture whose model they quantize
    extra: dict = field(default_factory=dict)


MOE_BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, rms_norm_eps=1e-6,
                max_position_embeddings=512, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

FIXTURES = [
    Fixture("moe_bf16_gqa2", "qwen3_moe, GQA 4:2, untied lm_head, norm_topk_prob on, 2 MoE layers",
            "qwen3_moe", dict(MOE_BASE)),
    Fixture("moe_bf16_gqa4_tied_dense_layer",
            "qwen3_moe, GQA 4:1, tied embeddings, norm_topk_prob off, top-3 of 8, "
            "3 layers with layer 1 a dense MLP (mlp_only_layers=[1])",
            "qwen3_moe", dict(MOE_BASE, num_hidden_layers=3, num_key_value_heads=1, tie_word_embeddings=True,
                              norm_topk_prob=False, num_experts_per_tok=3, mlp_only_layers=[1])),
    Fixture("moe_bf16_yarn_mha_sparse_step2",
            "qwen3_moe, MHA (4:4), head_dim 32 != hidden/heads, yarn RoPE (factor 4, original 32 "
            "positions, theta 1e6), decoder_sparse_step 2 (layers 1 and 3 MoE, 0 and 2 dense)",
            "qwen3_moe", dict(MOE_BASE, num_hidden_layers=4, num_key_value_heads=4, head_dim=32,
                              decoder_sparse_step=2, max_position_embeddings=128,
                              rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                               "original_max_position_embeddings": 32})),
    Fixture("qwen3_bf16_dense", "dense qwen3, GQA 4:2, tied embeddings, 2 layers",
            "qwen3", dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                          max_position_embeddings=512, tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    Fixture("moe_nvfp4_modelopt",
            "ModelOpt NVFP4 (NVFP4_DEFAULT_CFG: attention, dense MLP and experts W4A4; router, embeddings "
            "and lm_head BF16) of a random model with moe_bf16_gqa4_tied_dense_layer's config",
            "qwen3_moe", {}, quant="modelopt", base="moe_bf16_gqa4_tied_dense_layer"),
    Fixture("moe_fp8_modelopt",
            "ModelOpt FP8 per-tensor (FP8_DEFAULT_CFG: attention, dense MLP and experts F8_E4M3 with F32 "
            "weight_scale; router, embeddings and lm_head BF16) of a random model with "
            "moe_bf16_gqa4_tied_dense_layer's config; activations stay fp32",
            "qwen3_moe", {}, quant="modelopt_fp8", base="moe_bf16_gqa4_tied_dense_layer"),
    Fixture("moe_nvfp4_ct",
            "compressed-tensors NVFP4 (ModelOptNvfp4Converter of a ModelOpt export) of a random model with "
            "moe_bf16_gqa2's config",
            "qwen3_moe", {}, quant="ct", base="moe_bf16_gqa2"),
]


# ----------------------------------------------------------------------------------------------
# tokenizer: 256 byte tokens, id = byte value

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_tokenizer() -> Tokenizer:
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


# ----------------------------------------------------------------------------------------------
# models

def make_config(fx: Fixture):
    kwargs = dict(fx.config, attn_implementation="eager", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if fx.arch == "qwen3_moe":
        cfg = Qwen3MoeConfig(**kwargs)
        cfg.architectures = ["Qwen3MoeForCausalLM"]
        cfg._experts_implementation = "eager"
    else:
        cfg = Qwen3Config(**kwargs)
        cfg.architectures = ["Qwen3ForCausalLM"]
    return cfg


def model_class(arch: str):
    return Qwen3MoeForCausalLM if arch == "qwen3_moe" else Qwen3ForCausalLM


def random_model(fx: Fixture, seed: int):
    """fp32 model whose weights are exactly representable in bf16.

    Weights are scaled so the tiny model is far from uniform: linear weights ~ N(0, 1/fan_in)
    (activations keep unit scale), embeddings ~ N(0, 0.2^2) (small next to the residual branches,
    so a tied lm_head does not just repeat the last token), RMSNorm gains ~ 1 + N(0, 0.2^2) (a
    gain bug must show). HF's default init (std 0.02) would make logits nearly flat and routing
    and greedy choices near-ties."""
    cfg = make_config(fx)
    torch.manual_seed(seed)
    model = model_class(fx.arch)(cfg).eval()

    def draw(name: str, p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        if p.dim() == 1:
            return 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        if "embed_tokens" in name:
            return 0.2 * torch.randn(p.shape, generator=g)
        return linear_init(p, g)

    fill_bf16_exact(model, seed, draw)
    return model


def linear_init(p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """N(0, 1/fan_in): activations keep unit scale through the layer."""
    return torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5


def fill_bf16_exact(model, seed: int, draw) -> None:
    """Sets every parameter, in order, to draw(name, param, generator) rounded to bf16 (held in
    fp32), so a bf16 checkpoint of the model holds exactly the weights the reference ran with."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(draw(name, p, g).to(torch.bfloat16).to(torch.float32))


class RouterMargins:
    """Records min over tokens and layers of p_k - p_{k+1} (sorted router probabilities)."""

    def __init__(self, model):
        self.min = float("inf")
        self.handles = []
        for mod in model.modules():
            if type(mod).__name__ in ROUTER_TYPES:
                self.handles.append(mod.register_forward_hook(self.hook))

    def hook(self, mod, inputs, output):
        x = inputs[0].reshape(-1, mod.hidden_dim)
        probs = torch.softmax(F.linear(x, mod.weight), dim=-1, dtype=torch.float)
        top = torch.sort(probs, dim=-1, descending=True).values
        self.min = min(self.min, float((top[:, mod.top_k - 1] - top[:, mod.top_k]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def greedy_oracle(model, prompt_ids: list[int]) -> dict:
    """Greedy continuation (full forward each step, no cache) and the teacher-forced logits."""
    ids = list(prompt_ids)
    for _ in range(GREEDY_STEPS):
        logits = model(torch.tensor([ids])).logits[0, -1]
        ids.append(int(torch.argmax(logits)))
    margins = RouterMargins(model)
    logits = model(torch.tensor([ids])).logits[0].float()
    margins.close()
    greedy = ids[len(prompt_ids):]
    # Every generated token must be the argmax of the all-at-once logits too, by a clear margin.
    step_margin = float("inf")
    for i, tok in enumerate(greedy):
        row = logits[len(prompt_ids) - 1 + i]
        top2 = torch.topk(row, 2)
        if int(top2.indices[0]) != tok:
            step_margin = -1.0
            break
        step_margin = min(step_margin, float((top2.values[0] - top2.values[1]) / row.abs().max()))
    return {"ids": ids, "greedy": greedy, "logits": logits, "greedy_margin": step_margin,
            "router_margin": margins.min}


def acceptable(result: dict, min_router_margin: float = MIN_ROUTER_MARGIN) -> bool:
    return (result["greedy_margin"] >= MIN_GREEDY_MARGIN and result["router_margin"] >= min_router_margin
            and len(set(result["greedy"])) >= MIN_DISTINCT)


# ----------------------------------------------------------------------------------------------
# NVFP4: ModelOpt export, compressed-tensors conversion, dequantized references

def vllm_ref_quant_dequant(x: torch.Tensor, global_scale: torch.Tensor, block: int = 16) -> torch.Tensor:
    """vLLM's ref_nvfp4_quant + ref_nvfp4_quant_dequant (CPU), same op order; global = 1/input_scale.
    Identical to vllm_ref_quant in tools/make_quant_fixtures.py (the numerics golden fixtures)."""
    from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4

    def get_reciprocal(t: torch.Tensor) -> torch.Tensor:
        return 1.0 / (t + (t == 0) * 1e8)

    shape = x.shape
    x = x.reshape(-1, shape[-1]).float()
    m, n = x.shape
    xb = x.reshape(m, n // block, block)
    vec_max = torch.max(torch.abs(xb), dim=-1, keepdim=True)[0].to(torch.float32)
    scale = global_scale * (vec_max * (1 / 6.0))
    scale = torch.clamp(scale, max=448, min=-448)
    scale = scale.to(torch.float8_e4m3fn).to(torch.float32)
    output_scale = get_reciprocal(scale * get_reciprocal(global_scale))
    scaled_x = xb.to(torch.float32) * output_scale
    clipped = torch.clamp(scaled_x, -6.0, 6.0).reshape(m, n)
    x_fp4 = cast_to_fp4(clipped)
    deq = (x_fp4.reshape(m, n // block, block) * (scale / global_scale)).reshape(m, n)
    return deq.reshape(shape)


def modelopt_export(model, calib_ids: list[int], out: Path, cfg_name: str = "NVFP4_DEFAULT_CFG",
                    disabled: tuple[str, ...] = ()) -> None:
    """Quantizes a bf16 copy of `model` with ModelOpt's config `cfg_name`, calibrated on `calib_ids`,
    and exports it to `out`; quantizers matching a pattern in `disabled` stay off (left BF16)."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    qmodel = copy.deepcopy(model).to(torch.bfloat16)
    qmodel.config._experts_implementation = "eager"
    qcfg = copy.deepcopy(getattr(mtq, cfg_name))
    for pattern in disabled:
        qcfg["quant_cfg"].append({"quantizer_name": pattern, "enable": False})

    def calibrate(m):
        m(torch.tensor([calib_ids]))

    mtq.quantize(qmodel, qcfg, calibrate)
    export_hf_checkpoint(qmodel, export_dir=str(out))


def ct_convert(modelopt_dir: Path, out: Path) -> None:
    from compressed_tensors.entrypoints.convert.convert_checkpoint import convert_checkpoint
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter

    hf_quant = json.loads((modelopt_dir / "hf_quant_config.json").read_text())
    ignore = hf_quant["quantization"]["exclude_modules"]
    convert_checkpoint(str(modelopt_dir), str(out), ModelOptNvfp4Converter(ignore=ignore, targets=["Linear"]),
                       max_workers=1, device="cpu")
    (out / "hf_quant_config.json").unlink(missing_ok=True)


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def dequantized_state(ckpt: Path, kind: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Module weights (fp32) as the producing tool dequantizes them, and each module's input scale
    (ModelOpt convention, amax/2688) for W4A4."""
    t = read_tensors(ckpt / "model.safetensors")
    weights, input_scales = {}, {}
    if kind == "modelopt_fp8":
        for name, w in t.items():
            if name.endswith(".weight"):
                module = name[: -len(".weight")]
                scale = t.get(module + ".weight_scale") if w.dtype == torch.float8_e4m3fn else None
                weights[module] = w.float() * scale.float() if scale is not None else w.float()
    elif kind == "modelopt":
        from modelopt.torch.quantization.qtensor import NVFP4QTensor
        for name, w in t.items():
            if not name.endswith(".weight"):
                continue
            module = name[: -len(".weight")]
            if w.dtype == torch.uint8:
                q = NVFP4QTensor(torch.Size([w.shape[0], w.shape[1] * 2]), torch.float32, w)
                weights[module] = q.dequantize(dtype=torch.float32, scale=t[module + ".weight_scale"],
                                               double_scale=t[module + ".weight_scale_2"], block_sizes={-1: 16})
                if module + ".input_scale" in t:
                    input_scales[module] = float(t[module + ".input_scale"])
            else:
                weights[module] = w.float()
    else:
        from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
        from compressed_tensors.quantization import QuantizationScheme
        from compressed_tensors.quantization.lifecycle.forward import dequantize
        from compressed_tensors.quantization.quant_scheme import NVFP4
        args = QuantizationScheme(targets=["Linear"], **NVFP4).weights
        for name, w in t.items():
            if name.endswith(".weight_packed"):
                module = name[: -len(".weight_packed")]
                m, n2 = w.shape
                x_q = unpack_fp4_from_uint8(w, m, n2 * 2, dtype=torch.float32)
                weights[module] = dequantize(x_q, scale=t[module + ".weight_scale"].to(torch.float32),
                                             global_scale=t[module + ".weight_global_scale"],
                                             args=args, dtype=torch.float32).float()
                if module + ".input_global_scale" in t:
                    input_scales[module] = float(1.0 / t[module + ".input_global_scale"])
            elif name.endswith(".weight"):
                weights[name[: -len(".weight")]] = t[name].float()
    return weights, input_scales


def load_dequantized(base_model, weights: dict[str, torch.Tensor]):
    """A fresh fp32 transformers model holding the dequantized weights (keyed by the model's module
    names). transformers v5 keeps the experts fused ([E, 2I, H] gate_up_proj, [E, H, I] down_proj);
    the checkpoint is per expert."""
    model = copy.deepcopy(base_model)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                prefix = name.rsplit(".", 1)[0]
                for e in range(p.shape[0]):
                    if name.endswith("gate_up_proj"):
                        p[e].copy_(torch.cat([weights[f"{prefix}.{e}.gate_proj"], weights[f"{prefix}.{e}.up_proj"]]))
                    else:
                        p[e].copy_(weights[f"{prefix}.{e}.down_proj"])
            elif name.endswith(".weight"):
                module = name[: -len(".weight")]
                if module == "lm_head" and module not in weights:  # tied
                    continue
                p.copy_(weights[module])
    return model


def input_global(scale: float) -> torch.Tensor:
    """The global scale vLLM quantizes activations with: 1 / input_scale."""
    return 1.0 / torch.tensor(scale, dtype=torch.float32)


def install_w4a4(model, input_scales: dict[str, float]) -> None:
    """Fake-quantize the input of every quantized Linear and expert projection (vLLM emulation)."""
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name in input_scales:
            gs = input_global(input_scales[name])
            mod.forward = (lambda m, gs_: lambda x: F.linear(vllm_ref_quant_dequant(x, gs_), m.weight))(mod, gs)
        if type(mod).__name__ == "Qwen3MoeExperts":
            mod.forward = experts_w4a4_forward(mod, name, input_scales)


def experts_w4a4_forward(mod, name: str, input_scales: dict[str, float]):
    """The fused experts module `name`'s forward (transformers' eager loop, the same in Qwen3-MoE,
    Qwen3.5-MoE and Qwen3-Next) with per-expert activation fake quantization."""
    scales = [tuple(input_global(input_scales[f"{name}.{e}.{p}"]) for p in ("gate_proj", "up_proj", "down_proj"))
              for e in range(mod.num_experts)]

    def forward(hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        inter = mod.intermediate_dim
        for e in range(mod.num_experts):
            top_k_pos, token_idx = torch.where(top_k_index.T == e)
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            g_gate, g_up, g_down = scales[e]
            w = mod.gate_up_proj[e]
            gate = F.linear(vllm_ref_quant_dequant(x, g_gate), w[:inter])
            up = F.linear(vllm_ref_quant_dequant(x, g_up), w[inter:])
            h = mod.act_fn(gate) * up
            out = F.linear(vllm_ref_quant_dequant(h, g_down), mod.down_proj[e])
            final.index_add_(0, token_idx, out * top_k_weights[token_idx, top_k_pos, None])
        return final
    return forward


# ----------------------------------------------------------------------------------------------
# writing

def fix_config(path: Path) -> None:
    """transformers 5 writes num_experts as num_local_experts (its attribute_map); released
    Qwen3-MoE checkpoints spell it num_experts, which is what the engine reads."""
    cfg = json.loads(path.read_text())
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def write_oracle(out: Path, fx, prompt_text: str, prompt_ids: list[int], variants: dict[str, dict], seed: int,
                 tok: Tokenizer, generator: str = "tools/make_oracle_fixtures.py") -> None:
    """oracle.safetensors and oracle.json (see the module docstring) for fixture `fx` (either
    script's Fixture: name, description, arch, quant)."""
    tensors, meta = {}, {}
    for vname, r in variants.items():
        tensors[f"{vname}.logits"] = r["logits"].contiguous()
        tensors[f"{vname}.ids"] = torch.tensor(r["ids"], dtype=torch.int64)
        meta[vname] = {"greedy_ids": r["greedy"], "greedy_text": tok.decode(r["greedy"], skip_special_tokens=False),
                       "min_greedy_margin": r["greedy_margin"],
                       # null for dense qwen3 (no router)
                       "min_router_margin": None if r["router_margin"] == float("inf") else r["router_margin"]}
    save_file(tensors, str(out / "oracle.safetensors"), metadata={"generator": generator})
    doc = {"name": fx.name, "description": fx.description, "arch": fx.arch, "checkpoint": fx.quant,
           "seed": seed, "prompt_text": prompt_text, "prompt_ids": prompt_ids, "greedy_steps": GREEDY_STEPS,
           "variants": meta, "generator": generator, "versions": VERSIONS}
    (out / "oracle.json").write_text(json.dumps(doc, indent=1) + "\n")


def tidy_checkpoint(out: Path) -> None:
    for extra in ("generation_config.json", "recipe.yaml"):
        (out / extra).unlink(missing_ok=True)
    fix_config(out / "config.json")


def build_bf16(fx: Fixture, out: Path, prompt_ids: list[int], tok: Tokenizer, first_seed: int = 0):
    for seed in range(first_seed, first_seed + 200):
        model = random_model(fx, seed)
        r = greedy_oracle(model, prompt_ids)
        if acceptable(r):
            break
    else:
        raise SystemExit(f"{fx.name}: no seed gave clear margins")
    model.to(torch.bfloat16).save_pretrained(str(out))
    model.float()
    tidy_checkpoint(out)
    tok.save(str(out / "tokenizer.json"))
    write_oracle(out, fx, PROMPT, prompt_ids, {"default": r}, seed, tok)
    return model, seed, r


def build_nvfp4(fx: Fixture, out: Path, base: tuple, prompt_ids: list[int], tok: Tokenizer) -> None:
    base_fx, base_seed = base
    for seed in range(base_seed, base_seed + 200):
        model = random_model(base_fx, seed)
        calib = greedy_oracle(model, prompt_ids)["ids"]
        with tempfile.TemporaryDirectory() as tmp:
            mo_dir = Path(tmp) / "modelopt"
            cfg_name = "FP8_DEFAULT_CFG" if fx.quant == "modelopt_fp8" else "NVFP4_DEFAULT_CFG"
            modelopt_export(model, calib, mo_dir, cfg_name)
            tidy_checkpoint(mo_dir)
            if fx.quant == "ct":
                ct_convert(mo_dir, Path(tmp) / "ct")
                ckpt = Path(tmp) / "ct"
            else:
                ckpt = mo_dir
            weights, input_scales = dequantized_state(ckpt, fx.quant)
            ref = load_dequantized(model, weights)
            variants = {"default": greedy_oracle(ref, prompt_ids)}
            if fx.quant == "modelopt":
                install_w4a4(ref, input_scales)
                variants["w4a4"] = greedy_oracle(ref, prompt_ids)
            if all(acceptable(v) for v in variants.values()):
                out.mkdir(parents=True)
                for f in ckpt.iterdir():
                    if f.name in ("config.json", "model.safetensors", "hf_quant_config.json"):
                        shutil.copy(f, out / f.name)
                tidy_checkpoint(out)
                break
    else:
        raise SystemExit(f"{fx.name}: no seed gave clear margins")
    tok.save(str(out / "tokenizer.json"))
    write_oracle(out, fx, PROMPT, prompt_ids, variants, seed, tok)


def command_line(doc: str, data_dir: str, only_help: str, names: list[str]) -> argparse.Namespace:
    """--out DIR (default tests/data/<data_dir>) and --only NAME, shared by the fixture scripts.
    Without --only the output folder is rebuilt from scratch. Also pins torch to one thread
    (deterministic reductions)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/data" / data_dir)
    ap.add_argument("--only", help=only_help)
    args = ap.parse_args()
    if args.only and args.only not in names:
        raise SystemExit(f"unknown fixture {args.only}")
    torch.set_num_threads(1)
    if args.only is None and args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main() -> None:
    args = command_line(__doc__, "oracle", "build only this fixture (its base too)", [fx.name for fx in FIXTURES])
    tok = byte_tokenizer()
    prompt_ids = tok.encode(PROMPT).ids
    assert prompt_ids == list(PROMPT.encode()), prompt_ids
    by_name = {fx.name: fx for fx in FIXTURES}
    wanted = [fx for fx in FIXTURES if args.only in (None, fx.name)]
    seeds: dict[str, int] = {}
    for fx in FIXTURES:
        if fx.quant != "bf16":
            continue
        needed = fx in wanted or any(w.base == fx.name for w in wanted)
        if not needed:
            continue
        out = args.out / fx.name
        if out.exists() and fx not in wanted:
            seeds[fx.name] = json.loads((out / "oracle.json").read_text())["seed"]
            continue
        shutil.rmtree(out, ignore_errors=True)
        _, seeds[fx.name], r = build_bf16(fx, out, prompt_ids, tok)
        print(f"{fx.name}: seed {seeds[fx.name]}, greedy margin {r['greedy_margin']:.2e}, "
              f"router margin {r['router_margin']:.2e}")
    for fx in wanted:
        if fx.quant == "bf16":
            continue
        out = args.out / fx.name
        shutil.rmtree(out, ignore_errors=True)
        build_nvfp4(fx, out, (by_name[fx.base], seeds[fx.base]), prompt_ids, tok)
        print(f"{fx.name}: {json.loads((out / 'oracle.json').read_text())['variants'].keys()}")
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"total {total / 1e6:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
