"""Continuous batching seen from clients: 16 streams at once give each the text it gets alone;
a client that disconnects frees its sequence at once; a full queue answers 503."""
import json
import socket
import time

import openai
import pytest

from conftest import http, run_together


def prompts(n):
    return [[{"role": "user", "content": f"Request {i}: describe the number {i * 7 + 3}."}] for i in range(n)]


def greedy_stream(client, messages, max_tokens):
    chunks = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens,
                                            temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_sixteen_streams_equal_each_alone(client, server):
    msgs = prompts(16)
    alone = [greedy_stream(client, m, 24) for m in msgs]
    together = run_together(16, lambda i: greedy_stream(client, msgs[i], 24))
    for i in range(16):
        assert together[i] == alone[i], f"stream {i} differs when batched"
    assert len(set(alone)) > 1  # different prompts, different texts: the test compares something


def open_stream(port, body, events=3):
    """A raw streaming request; returns the socket once `events` SSE events arrived (the first
    carries only the role, the next ones tokens)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    payload = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    got = b""
    while got.count(b"data: ") < events:
        part = s.recv(4096)
        assert part, "server closed the stream"
        got += part
    return s


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_disconnect_frees_the_sequence_promptly(server):
    cancelled_before = server.metric("fp4serve_requests_cancelled_total")
    generated_before = server.metric("fp4serve_scheduler_generated_tokens_total")
    body = {"model": "tiny", "messages": prompts(1)[0], "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True}
    s = open_stream(server.port, body)
    assert server.metric("fp4serve_requests_running") >= 1
    s.close()
    closed_at = time.time()
    assert wait_for(lambda: server.metric("fp4serve_requests_running") == 0, 10), "sequence still running"
    freed_after = time.time() - closed_at
    assert server.metric("fp4serve_kv_cache_blocks_used") == 0
    assert server.metric("fp4serve_requests_cancelled_total") == cancelled_before + 1
    # It stopped long before its 400 tokens.
    assert server.metric("fp4serve_scheduler_generated_tokens_total") - generated_before < 400
    assert freed_after < 5


def test_full_queue_answers_503(start_server):
    srv = start_server("--max-num-seqs", "1", "--max-queue", "1")
    body = {"model": "tiny", "messages": prompts(1)[0], "max_tokens": 4000, "temperature": 0, "stream": True,
            "ignore_eos": True}
    running = open_stream(srv.port, body)  # admitted and decoding
    waiting = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    payload = json.dumps(body).encode()
    waiting.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    assert wait_for(lambda: srv.metric("fp4serve_requests_waiting") == 1, 30)
    status, err = http("POST", srv.base + "/v1/chat/completions", dict(body, stream=False))
    assert status == 503, err
    assert err["error"]["code"] == "queue_full"
    running.close()
    waiting.close()


def test_api_key(start_server):
    srv = start_server("--api-key", "s3cret")
    body = {"model": "tiny", "messages": prompts(1)[0], "max_tokens": 2}
    assert http("POST", srv.base + "/v1/chat/completions", body)[0] == 401
    status, err = http("POST", srv.base + "/v1/chat/completions", body, {"Authorization": "Bearer wrong"})
    assert status == 401 and err["error"]["code"] == "invalid_api_key"
    assert http("GET", srv.base + "/v1/models")[0] == 401
    assert http("GET", srv.base + "/health")[0] == 200
    good = openai.OpenAI(base_url=srv.base + "/v1", api_key="s3cret", max_retries=0)
    assert good.chat.completions.create(model="tiny", messages=prompts(1)[0], max_tokens=2).choices
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
