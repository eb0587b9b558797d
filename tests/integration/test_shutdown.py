"""SIGTERM while streams run: they complete, new requests are refused, the process exits 0."""
import signal
import threading
import time

import openai


def test_sigterm_drains_running_streams(start_server):
    srv = start_server()
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
    n, max_tokens = 4, 96
    results = [None] * n
    first_chunk = [threading.Event() for _ in range(n)]

    def run(i):
        text, finish, count = "", None, 0
        stream = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"Tell story {i}"}], max_tokens=max_tokens,
            temperature=0, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        for c in stream:
            first_chunk[i].set()
            if c.choices:
                text += c.choices[0].delta.content or ""
                finish = c.choices[0].finish_reason or finish
            if c.usage:
                count = c.usage.completion_tokens
        results[i] = (finish, count)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for e in first_chunk:
        assert e.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    refused = False
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "late"}], max_tokens=2)
    except (openai.APIStatusError, openai.APIConnectionError):
        refused = True
    assert refused, "a request after SIGTERM was served"
    for t in threads:
        t.join(timeout=120)
    assert results == [("length", max_tokens)] * n, results
    assert srv.proc.wait(timeout=60) == 0, srv.log_text()
    assert "draining" in srv.log_text()
