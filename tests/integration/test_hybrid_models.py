"""The server on hybrid models (Gated DeltaNet + gated attention): each sequence carries its own
conv and recurrent state next to its KV blocks, so batching must not mix them up. Eight greedy
streams at once, with prompts prefilled in several small chunks and fewer running slots than
requests (so some wait and join later), each give the text they give alone."""
import subprocess

import openai
import pytest

from conftest import BINARY, Server, run_together


@pytest.fixture(scope="module", params=["qwen3_5_moe", "qwen3_next"])
def hybrid_server(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    subprocess.run([str(BINARY), "synth", "--arch", request.param, "--preset", "tiny", "--out", str(out),
                    "--quiet", "--force"], check=True, capture_output=True)
    s = Server(out, tmp_path_factory.mktemp("logs"), "--served-model-name", "hybrid", "--max-model-len", "512",
               "--prefill-chunk", "16", "--max-num-seqs", "5")
    yield s
    assert s.stop() == 0, s.log_text()


def greedy(client, i, max_tokens=20):
    messages = [{"role": "user", "content": f"Request {i}: " + "count the sheep, " * (i + 1)}]
    chunks = client.chat.completions.create(model="hybrid", messages=messages, max_tokens=max_tokens,
                                            temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_eight_streams_on_a_hybrid_model_equal_each_alone(hybrid_server):
    client = openai.OpenAI(base_url=hybrid_server.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    alone = [greedy(client, i) for i in range(8)]
    together = run_together(8, lambda i: greedy(client, i))
    assert together == alone
    assert len(set(alone)) > 1
    assert hybrid_server.metric("fp4serve_requests_running") == 0
