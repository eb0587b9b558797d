"""Malformed input over raw HTTP: every answer is an OpenAI-shaped JSON error with the right
status, and the server keeps serving afterwards."""
import http.client as httpclient
import json
import socket

import pytest

from conftest import http

CHAT = "/v1/chat/completions"
GOOD = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}


def post(server, path, body, headers=None):
    return http("POST", server.base + path, body, headers or {"Content-Type": "application/json"})


def assert_error(status_body, status, param=None):
    status_got, body = status_body
    assert status_got == status, body
    assert isinstance(body, dict) and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param, body


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"[1, 2]", b"null", b"\xff\xfe\x00garbage",
                                 b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff"}]}',
                                 b"[" * 100000, b'{"a":' * 50000])
def test_malformed_bodies_get_400(server, raw):
    assert_error(post(server, CHAT, raw), 400)


@pytest.mark.parametrize("patch,param", [
    ({"messages": None}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": 5, "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": "12"}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2**70}, "max_tokens"),
    ({"temperature": "warm"}, "temperature"),
    ({"top_p": -1}, "top_p"),
    ({"stream": "yes"}, "stream"),
    ({"stop": {"a": 1}}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"tools": {}}, "tools"),
    ({"unknown_field": 1}, "unknown_field"),
    ({"model": 7}, "model"),
])
def test_wrong_types_and_values_name_the_parameter(server, patch, param):
    body = dict(GOOD)
    body.update(patch)
    if patch.get("messages", 0) is None:
        del body["messages"]
    assert_error(post(server, CHAT, body), 400, param)


def test_completions_prompt_errors(server):
    assert_error(post(server, "/v1/completions", {"model": "tiny", "prompt": [99999999]}), 400, "prompt")
    assert_error(post(server, "/v1/completions", {"model": "tiny", "prompt": ["a", "b"]}), 400, "prompt")
    assert_error(post(server, "/v1/completions", {"model": "tiny"}), 400, "prompt")


def test_model_may_be_omitted_as_in_vllm(server):
    body = dict(GOOD)
    del body["model"]
    status, reply = post(server, CHAT, body)
    assert status == 200, reply
    assert reply["model"] == "tiny"


def test_unknown_model_route_and_method(server):
    assert_error(post(server, CHAT, dict(GOOD, model="nope")), 404, "model")
    assert_error(http("GET", server.base + "/v1/nothing"), 404)
    assert_error(http("GET", server.base + CHAT), 404)


def test_body_too_large_gets_413(server):
    big = json.dumps(dict(GOOD, messages=[{"role": "user", "content": "a" * (40 << 20)}])).encode()
    try:
        assert_error(post(server, CHAT, big), 413)
    except (ConnectionResetError, BrokenPipeError):
        pass  # the server may close before the client finished sending; it must still be alive:
    assert http("GET", server.base + "/health")[0] == 200


def test_garbage_on_the_socket_does_not_hurt(server):
    for junk in [b"\x00\x01\x02\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\n"
                 b"Content-Length: 99999999999999999999\r\n\r\n{}", b"A" * 70000 + b"\r\n\r\n"]:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3) as s:
            s.sendall(junk)
            try:
                s.recv(4096)
            except OSError:
                pass
    assert post(server, CHAT, GOOD)[0] == 200


def test_client_gone_before_reading_the_answer(server):
    conn = httpclient.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", CHAT, json.dumps(dict(GOOD, max_tokens=8)), {"Content-Type": "application/json"})
    conn.close()
    assert post(server, CHAT, GOOD)[0] == 200


def test_health_and_metrics(server):
    assert http("GET", server.base + "/health") == (200, {"status": "ok"})
    status, text = http("GET", server.base + "/metrics")
    assert status == 200
    for name in ["fp4serve_requests_total", "fp4serve_time_to_first_token_seconds_bucket",
                 "fp4serve_time_per_output_token_seconds_bucket", "fp4serve_requests_waiting",
                 "fp4serve_requests_running", "fp4serve_kv_cache_usage_ratio", "fp4serve_kernel_backend_info",
                 "fp4serve_nan_guard_events_total", "fp4serve_prompt_tokens_total",
                 "fp4serve_generation_tokens_total"]:
        assert name in text, name
