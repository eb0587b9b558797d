#!/usr/bin/env python3
"""Throughput of a running fp4serve (or any OpenAI-compatible) server at 1, 4 and 16 concurrent
streams: requests/s, output tokens/s and time to first token, printed as a table.

    fp4serve serve -m DIR --port 8000 &
    python3 bench/serve_bench.py --base-url http://127.0.0.1:8000 [--model NAME] [--requests 32]
        [--max-tokens 64] [--concurrency 1,4,16] [--api-key KEY] [--json]

Standard library only (asyncio + raw HTTP/1.1 streaming), so it runs without the test venv.
Requests are greedy with ignore_eos, so every one generates exactly --max-tokens tokens.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.parse
import urllib.request


async def one_request(host, port, path, headers, body):
    """Streams one completion; returns (time to first token, output tokens)."""
    reader, writer = await asyncio.open_connection(host, port)
    payload = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}", "Connection: close"] + [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    await writer.drain()
    start = time.perf_counter()
    status = (await reader.readline()).decode()
    if " 200 " not in status:
        rest = await reader.read()
        raise RuntimeError(f"{status.strip()}: {rest.decode(errors='replace')[-300:]}")
    first = None
    tokens = 0
    buf = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                # Chunked transfer framing lines are not "data:" lines; skip them.
                idx = line.find(b"data: ")
                if idx < 0:
                    continue
                data = line[idx + 6:]
                if data.strip() == b"[DONE]":
                    continue
                msg = json.loads(data)
                if msg.get("usage"):
                    tokens = msg["usage"]["completion_tokens"]
                if msg.get("choices") and first is None and msg["choices"][0].get("text"):
                    first = time.perf_counter() - start
    writer.close()
    return (first if first is not None else time.perf_counter() - start), tokens


async def run_level(args, host, port, headers, concurrency):
    queue = list(range(args.requests))
    ttfts, tokens = [], 0

    async def worker():
        nonlocal tokens
        while queue:
            i = queue.pop()
            body = {"model": args.model, "prompt": f"Request {i}: write about the number {i}.",
                    "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            ttft, n = await one_request(host, port, "/v1/completions", headers, body)
            ttfts.append(ttft)
            tokens += n

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    return {"concurrency": concurrency, "requests": args.requests, "seconds": seconds,
            "requests_per_s": args.requests / seconds, "output_tokens": tokens,
            "output_tokens_per_s": tokens / seconds, "ttft_median_s": statistics.median(ttfts),
            "ttft_max_s": max(ttfts)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--requests", type=int, default=32, help="requests per concurrency level")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--api-key")
    p.add_argument("--json", action="store_true", help="print one JSON object per level instead of a table")
    args = p.parse_args()
    url = urllib.parse.urlparse(args.base_url)
    host, port = url.hostname, url.port or 80
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    if not args.model:
        req = urllib.request.Request(args.base_url + "/v1/models", headers=headers)
        with urllib.request.urlopen(req, timeout=30) as r:
            args.model = json.load(r)["data"][0]["id"]
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = [asyncio.run(run_level(args, host, port, headers, c)) for c in levels]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"model {args.model}, {args.requests} requests per level, {args.max_tokens} output tokens each")
    print(f"{'streams':>8} {'req/s':>8} {'out tok/s':>10} {'TTFT med':>9} {'TTFT max':>9} {'seconds':>8}")
    for r in rows:
        print(f"{r['concurrency']:>8} {r['requests_per_s']:>8.2f} {r['output_tokens_per_s']:>10.1f} "
              f"{r['ttft_median_s']:>9.3f} {r['ttft_max_s']:>9.3f} {r['seconds']:>8.2f}")


if __name__ == "__main__":
    sys.exit(main())
