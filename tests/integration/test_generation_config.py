"""Requests that leave sampling fields out get the model's generation_config.json recommendation
(synth writes Qwen3's: temperature 0.6, top_p 0.95, top_k 20), as vLLM does by default;
`--generation-config vllm` falls back to OpenAI's defaults. With a fixed seed the sampled text
tells which settings were used."""
import json

from conftest import http

PROMPT = {"prompt": "Once upon a time", "max_tokens": 16, "seed": 1234}
QWEN_RECOMMENDED = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def text(server, **fields):
    status, body = http("POST", server.base + "/v1/completions", dict(PROMPT, **fields),
                        {"Content-Type": "application/json"})
    assert status == 200, body
    return body["choices"][0]["text"]


def test_omitted_fields_take_the_models_generation_config(model_dir, start_server):
    config = json.loads((model_dir / "generation_config.json").read_text())
    assert {k: config[k] for k in QWEN_RECOMMENDED} == QWEN_RECOMMENDED
    server = start_server()
    assert "temperature=0.6 top_p=0.95 top_k=20" in server.log_text()
    default = text(server)
    assert default == text(server, **QWEN_RECOMMENDED)
    assert default != text(server, **OPENAI_DEFAULTS)
    # A field the request sets wins over the recommendation.
    assert text(server, temperature=0) == text(server, temperature=0, top_k=1)


def test_generation_config_vllm_means_openai_defaults(start_server):
    server = start_server("--generation-config", "vllm")
    assert text(server) == text(server, **OPENAI_DEFAULTS)
    assert text(server) != text(server, **QWEN_RECOMMENDED)
