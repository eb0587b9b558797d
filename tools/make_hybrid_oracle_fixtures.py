#!/usr/bin/env python3
"""Generate the hybrid-model oracle fixtures in tests/data/oracle_hybrid/ with transformers.

Same method and file format as tools/make_oracle_fixtures.py (whose helpers this imports), for
the two hybrid architectures: Qwen3.5-MoE (`qwen3_5_moe`) and Qwen3-Next (`qwen3_next`), tiny
random models with Gated DeltaNet layers 0-2 and gated full attention in layer 3.

What each fixture records: the logits (fp32) at every position of a prompt followed by its
greedy continuation (base.GREEDY_STEPS tokens, each the argmax of a full forward of everything
before it, i.e. transformers' chunked delta rule), the greedy ids and their text (one token per
byte). Prompts are longer than the delta rule's chunk (64); the long one is longer than the
engine's prefill chunk (256), so both run more than one chunk.

Checkpoints are written in the layouts the real releases use:
* qwen3_5_moe_bf16_fused: the Qwen3.5 BF16 release layout -- Qwen3_5MoeForConditionalGeneration
  config with `text_config`, tensors under `model.language_model.`, fused 3-D experts
  (`experts.gate_up_proj` [E, 2I, H], gate rows first; `experts.down_proj` [E, H, I]), F32 A_log.
* qwen3_next_bf16: the Qwen3-Next release layout -- flat config with `full_attention_interval`
  (no `layer_types`) and top-level `rope_theta` / `partial_rotary_factor`, the grouped
  `in_proj_qkvz` / `in_proj_ba` projections, per-expert tensors; 1 key head serving 4 value
  heads, layer 1 a dense MLP (`mlp_only_layers`).
* *_nvfp4_modelopt: ModelOpt NVFP4 (`mtq.quantize` + `export_hf_checkpoint`) with the
  exclusions of nvidia/Qwen3.5-397B-A17B-NVFP4: only the routed experts are NVFP4 (W4A4 with
  static input scales); linear attention, full attention, shared experts and their gate, router,
  embeddings and lm_head stay BF16. ModelOpt writes the Qwen3.5 export under
  `model.language_model.` with a flat `qwen3_5_moe_text` config, as it ships. Variants
  "default" (W4A16: fp32 activations on the dequantized weights) and "w4a4" (expert inputs
  fake-quantized as vLLM's emulation does).

Rerun: `python tools/make_hybrid_oracle_fixtures.py` (or `--only NAME`). CPU only.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_oracle_fixtures as base  # noqa: E402
from transformers import (Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3NextConfig,  # noqa: E402
                          Qwen3NextForCausalLM)

GENERATOR = "tools/make_hybrid_oracle_fixtures.py"
SHORT_PROMPT = "Gated DeltaNet layers carry a recurrent state; full attention keeps a paged KV cache."
LONG_PROMPT = ("The quick brown fox jumps over the lazy dog while the engine prefills a long prompt. " * 4).strip()
MIN_ROUTER_MARGIN = 2e-5  # the greedy and distinct-token margins are make_oracle_fixtures'


@dataclass
class Fixture:
    name: str
    description: str
    arch: str            # "qwen3_5_moe" or "qwen3_next"
    config: dict
    prompt: str
    quant: str = "bf16"  # "bf16" or "modelopt"
    base: str | None = None


Q35 = dict(vocab_size=base.VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
           head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
           linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
           shared_expert_intermediate_size=32, num_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-6,
           max_position_embeddings=1024, tie_word_embeddings=False,
           rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [2, 1, 1], "mrope_interleaved": True})
NEXT = dict(vocab_size=base.VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=1, head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=16,
            linear_value_head_dim=8, linear_num_key_heads=1, linear_num_value_heads=4, moe_intermediate_size=32,
            shared_expert_intermediate_size=24, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
            mlp_only_layers=[1], rms_norm_eps=1e-6, max_position_embeddings=1024, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25})

FIXTURES = [
    Fixture("qwen3_5_moe_bf16_fused",
            "qwen3_5_moe, Qwen3.5 BF16 release layout (text_config, model.language_model., fused experts), "
            "3 Gated DeltaNet + 1 gated attention layer, 2 key / 4 value heads, GQA 4:2, partial rotary 8 of 32, "
            "shared expert, long prompt (> 256 tokens)",
            "qwen3_5_moe", dict(Q35), LONG_PROMPT),
    Fixture("qwen3_next_bf16",
            "qwen3_next, Qwen3-Next release layout (in_proj_qkvz / in_proj_ba grouped per key head, per-expert "
            "tensors, full_attention_interval), 1 key head serving 4 value heads (dv 8 != dk 16), MQA 4:1, top-3, "
            "layer 1 a dense MLP (mlp_only_layers=[1])",
            "qwen3_next", dict(NEXT), SHORT_PROMPT),
    Fixture("qwen3_5_moe_nvfp4_modelopt",
            "ModelOpt NVFP4 of a random model with qwen3_5_moe_bf16_fused's config: routed experts only "
            "(the Qwen3.5-397B-A17B-NVFP4 exclusions), flat qwen3_5_moe_text config, model.language_model. tensors",
            "qwen3_5_moe", {}, SHORT_PROMPT, quant="modelopt", base="qwen3_5_moe_bf16_fused"),
    Fixture("qwen3_next_nvfp4_modelopt",
            "ModelOpt NVFP4 of a random model with qwen3_next_bf16's config: routed experts only",
            "qwen3_next", {}, SHORT_PROMPT, quant="modelopt", base="qwen3_next_bf16"),
]


# ----------------------------------------------------------------------------------------------
# models

def make_config(fx: Fixture):
    kwargs = dict(fx.config, attn_implementation="eager", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if fx.arch == "qwen3_5_moe":
        cfg = Qwen3_5MoeTextConfig(**kwargs)
        cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    else:
        cfg = Qwen3NextConfig(**kwargs)
        cfg.architectures = ["Qwen3NextForCausalLM"]
    cfg._experts_implementation = "eager"
    return cfg


def random_model(fx: Fixture, seed: int):
    """fp32 model whose weights are exactly representable in bf16, scaled so the tiny model is far
    from uniform (see make_oracle_fixtures.random_model). Zero-centred RMSNorm weights are
    N(0, 0.2^2) (gain 1 + w); the gated norm's plain gain 1 + N(0, 0.2^2); A = exp(A_log) in
    [0.02, 0.5] and dt_bias ~ N(0, 0.5^2), so the state decays slowly enough that the recurrence
    (and its carry across chunks) shapes the logits."""
    cfg = make_config(fx)
    torch.manual_seed(seed)
    cls = Qwen3_5MoeForCausalLM if fx.arch == "qwen3_5_moe" else Qwen3NextForCausalLM
    model = cls(cfg).eval()

    def draw(name: str, p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        if name.endswith("A_log"):
            return torch.log(0.02 + 0.48 * torch.rand(p.shape, generator=g))
        if name.endswith("dt_bias"):
            return 0.5 * torch.randn(p.shape, generator=g)
        if name.endswith("linear_attn.norm.weight"):
            return 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        if p.dim() == 1 or "embed_tokens" in name:
            return 0.2 * torch.randn(p.shape, generator=g)
        if "conv1d" in name:
            return 0.5 * torch.randn(p.shape, generator=g)
        return base.linear_init(p, g)

    base.fill_bf16_exact(model, seed, draw)
    return model


# ----------------------------------------------------------------------------------------------
# checkpoint layouts

def release_tensors(fx: Fixture, model) -> dict[str, torch.Tensor]:
    """The model's parameters named and laid out as the real BF16 release stores them."""
    # transformers v5 holds the experts fused in memory, as the Qwen3.5 release stores them.
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if fx.arch == "qwen3_next":
        unfuse_experts(sd)  # the Qwen3-Next release has per-expert tensors
        return sd
    out = {}
    for k, v in sd.items():
        if k.endswith("A_log"):
            v = v.float()  # the release keeps A_log in F32 (the loader accepts both)
        out[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    return out


def release_config(fx: Fixture, model) -> dict:
    cfg = model.config.to_dict()
    for k in ("transformers_version", "_experts_implementation", "attn_implementation", "dtype", "torch_dtype",
              "output_attentions", "output_hidden_states", "return_dict", "use_cache"):
        cfg.pop(k, None)
    cfg["torch_dtype"] = "bfloat16"
    if fx.arch == "qwen3_next":
        # Released as full_attention_interval with the pre-v5 rope fields.
        cfg.pop("layer_types")
        cfg["full_attention_interval"] = 4
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope["rope_theta"]
        cfg["partial_rotary_factor"] = rope["partial_rotary_factor"]
        cfg["rope_scaling"] = None
        return cfg
    text = dict(cfg, model_type="qwen3_5_moe_text")
    text.pop("architectures", None)
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "tie_word_embeddings": False, "text_config": text,
            "vision_config": {"model_type": "qwen3_5_moe_vision", "depth": 1, "hidden_size": 32,
                              "out_hidden_size": fx.config["hidden_size"]}}


def write_release(fx: Fixture, model, out: Path) -> None:
    tensors = release_tensors(fx, model)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(release_config(fx, model), indent=2, sort_keys=True) + "\n")
    check_release(fx, model, out)


def unfuse_experts(t: dict[str, torch.Tensor]) -> None:
    """experts.gate_up_proj [E, 2I, H] (gate rows first) / down_proj [E, H, I] -> per-expert weights."""
    for key in [k for k in t if k.endswith(".experts.gate_up_proj")]:
        p = key[: -len(".gate_up_proj")]
        gate_up, down = t.pop(key), t.pop(p + ".down_proj")
        inter = gate_up.shape[1] // 2
        for e in range(gate_up.shape[0]):
            t[f"{p}.{e}.gate_proj.weight"] = gate_up[e, :inter].contiguous()
            t[f"{p}.{e}.up_proj.weight"] = gate_up[e, inter:].contiguous()
            t[f"{p}.{e}.down_proj.weight"] = down[e].contiguous()


def check_release(fx: Fixture, model, out: Path) -> None:
    """The written file holds exactly the weights the oracle ran with."""
    t = base.read_tensors(out / "model.safetensors")
    if fx.arch == "qwen3_next":
        unfuse_check = {}
        for name, p in model.named_parameters():
            if ".experts." in name:
                unfuse_check[name] = p.detach()
        unfuse_experts(unfuse_check)
        for key, v in unfuse_check.items():
            if not torch.equal(t[key].float(), v.float()):
                raise SystemExit(f"{fx.name}: {key} differs from the model's weights")
    for name, p in model.named_parameters():
        if fx.arch == "qwen3_next" and ".experts." in name:
            continue
        key = name.replace("model.", "model.language_model.", 1) if fx.arch == "qwen3_5_moe" else name
        if key not in t:
            raise SystemExit(f"{fx.name}: {key} missing from the written checkpoint")
        if not torch.equal(t[key].float(), p.detach().float()):
            raise SystemExit(f"{fx.name}: {key} differs from the model's weights")


# ----------------------------------------------------------------------------------------------
# NVFP4 (ModelOpt, routed experts only)

# nvidia/Qwen3.5-397B-A17B-NVFP4 (V1): "NVFP4 quantization of linear operators within the MoE
# blocks" -- the routed experts only; these quantizers stay off.
NOT_QUANTIZED = ("*linear_attn*", "*self_attn*", "*shared_expert*", "*mlp.gate_proj*", "*mlp.up_proj*",
                 "*mlp.down_proj*")


def model_name(ckpt_module: str) -> str:
    return ckpt_module.replace("model.language_model.", "model.", 1)


def install_w4a4(model, input_scales: dict[str, float]) -> None:
    scales = {model_name(k): v for k, v in input_scales.items()}
    for name, mod in model.named_modules():
        if type(mod).__name__ in ("Qwen3_5MoeExperts", "Qwen3NextExperts"):
            mod.forward = base.experts_w4a4_forward(mod, name, scales)
        elif isinstance(mod, torch.nn.Linear) and name in scales:
            raise SystemExit(f"unexpected quantized Linear {name}: only routed experts should be NVFP4")


def build_nvfp4(fx: Fixture, out: Path, base_fx: Fixture, base_seed: int, prompt_ids: list[int], tok) -> None:
    for seed in range(base_seed, base_seed + 200):
        model = random_model(base_fx, seed)
        calib = base.greedy_oracle(model, prompt_ids)["ids"]
        with tempfile.TemporaryDirectory() as tmp:
            mo = Path(tmp) / "modelopt"
            base.modelopt_export(model, calib, mo, disabled=NOT_QUANTIZED)
            weights, input_scales = base.dequantized_state(mo, "modelopt")
            ref = base.load_dequantized(model, {model_name(k): v for k, v in weights.items()})
            variants = {"default": base.greedy_oracle(ref, prompt_ids)}
            install_w4a4(ref, input_scales)
            variants["w4a4"] = base.greedy_oracle(ref, prompt_ids)
            if all(base.acceptable(v, MIN_ROUTER_MARGIN) for v in variants.values()):
                out.mkdir(parents=True)
                for name in ("config.json", "model.safetensors", "hf_quant_config.json"):
                    shutil.copy(mo / name, out / name)
                break
    else:
        raise SystemExit(f"{fx.name}: no seed gave clear margins")
    tidy_config(out / "config.json")
    tok.save(str(out / "tokenizer.json"))
    base.write_oracle(out, fx, fx.prompt, prompt_ids, variants, seed, tok, GENERATOR)


def tidy_config(path: Path) -> None:
    cfg = json.loads(path.read_text())
    for k in ("transformers_version", "_experts_implementation", "use_cache"):
        cfg.pop(k, None)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------

def build_bf16(fx: Fixture, out: Path, prompt_ids, tok) -> int:
    for seed in range(200):
        model = random_model(fx, seed)
        r = base.greedy_oracle(model, prompt_ids)
        if base.acceptable(r, MIN_ROUTER_MARGIN):
            break
    else:
        raise SystemExit(f"{fx.name}: no seed gave clear margins")
    out.mkdir(parents=True)
    write_release(fx, model, out)
    tok.save(str(out / "tokenizer.json"))
    base.write_oracle(out, fx, fx.prompt, prompt_ids, {"default": r}, seed, tok, GENERATOR)
    print(f"{fx.name}: seed {seed}, greedy margin {r['greedy_margin']:.2e}, router margin {r['router_margin']:.2e}")
    return seed


def main() -> None:
    args = base.command_line(__doc__, "oracle_hybrid", "build only this fixture (reusing its base's seed when present)",
                             [fx.name for fx in FIXTURES])
    tok = base.byte_tokenizer()
    by_name = {fx.name: fx for fx in FIXTURES}
    seeds: dict[str, int] = {}
    for fx in FIXTURES:
        out = args.out / fx.name
        prompt_ids = list(fx.prompt.encode())
        wanted = args.only in (None, fx.name)
        if fx.quant == "bf16":
            if not wanted and out.exists():
                seeds[fx.name] = json.loads((out / "oracle.json").read_text())["seed"]
                continue
            if not wanted and not any(f.base == fx.name and args.only == f.name for f in FIXTURES):
                continue
            shutil.rmtree(out, ignore_errors=True)
            seeds[fx.name] = build_bf16(fx, out, prompt_ids, tok)
        elif wanted:
            shutil.rmtree(out, ignore_errors=True)
            build_nvfp4(fx, out, by_name[fx.base], seeds[fx.base], prompt_ids, tok)
            print(f"{fx.name}: seed {json.loads((out / 'oracle.json').read_text())['seed']}")
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"total {total / 1e6:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
