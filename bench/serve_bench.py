#!/usr/bin/env python3
"""Throughput of a running fp4serve (or any OpenAI-compatible) server at 1, 4 and 16 concurrent
streams: requests/s, output tokens/s and time to first token, printed as a table.

    fp4serve serve -m DIR --port 8000 &
    python3 bench/serve_bench.py --base-url http://127.0.0.1:8000 [--model NAME] [--requests 32]
        [--max-tokens 64] [--concurrency 1,4,16] [--api-key KEY] [--wait-seconds 600] [--json]

Standard library only (asyncio + raw HTTP/1.1 streaming), so it runs without the test venv.
Requests are greedy with ignore_eos, so every one generates exactly --max-tokens tokens.
It first waits for GET /v1/models to answer 200: a server that is not listening yet, or answers
503 while it loads its model, is polled until --wait-seconds. Any other failure ends the run with
one line on stderr naming the URL and what the server said: exit 2 before the first request, 1
after.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.error
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


class BenchError(Exception):
    """A failure to report as one line, with the exit status it ends the run with."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def models_when_ready(base_url, headers, wait_seconds):
    """GET /v1/models once it answers 200, polling while the server is not up yet or loading
    (connection refused, 503). Returns the parsed body."""
    url = base_url + "/v1/models"
    deadline = time.monotonic() + wait_seconds
    waited = False
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace").strip()[-300:]
            if e.code != 503:
                hint = " (wrong or missing --api-key?)" if e.code == 401 else ""
                raise BenchError(f"GET {url}: HTTP {e.code}{hint}: {detail}", 2)
            last = f"HTTP 503: {detail}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        except ValueError as e:
            raise BenchError(f"GET {url}: the answer is not JSON: {e}", 2)
        if time.monotonic() >= deadline:
            raise BenchError(f"GET {url}: not ready after {wait_seconds:g} s (last: {last})", 2)
        if not waited:
            print(f"serve_bench: waiting for {url} ({last})", file=sys.stderr, flush=True)
            waited = True
        time.sleep(0.5)


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def positive_list(text):
    return [positive_int(c) for c in text.split(",")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--requests", type=positive_int, default=32, help="requests per concurrency level")
    p.add_argument("--max-tokens", type=positive_int, default=64)
    p.add_argument("--concurrency", type=positive_list, default=[1, 4, 16], help="streams per level, e.g. 1,4,16")
    p.add_argument("--api-key")
    p.add_argument("--wait-seconds", type=float, default=600,
                   help="how long to wait for the server to come up and load its model (default 600)")
    p.add_argument("--json", action="store_true", help="print one JSON object per level instead of a table")
    args = p.parse_args()
    url = urllib.parse.urlparse(args.base_url)
    if url.scheme != "http" or not url.hostname:
        p.error(f"--base-url: expected http://HOST[:PORT], got '{args.base_url}'")
    host, port = url.hostname, url.port or 80
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        models = models_when_ready(args.base_url.rstrip("/"), headers, args.wait_seconds)
        if not args.model:
            listed = models.get("data") if isinstance(models, dict) else None
            if not listed or "id" not in listed[0]:
                raise BenchError(f"GET {args.base_url}/v1/models lists no model; pass --model", 2)
            args.model = listed[0]["id"]
        rows = []
        for c in args.concurrency:
            try:
                rows.append(asyncio.run(run_level(args, host, port, headers, c)))
            except (RuntimeError, OSError, ValueError) as e:
                raise BenchError(f"a request to {args.base_url} at {c} streams failed: {e}", 1)
    except BenchError as e:
        print(f"serve_bench: {e}", file=sys.stderr)
        return e.status
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"model {args.model}, {args.requests} requests per level, {args.max_tokens} output tokens each")
    print(f"{'streams':>8} {'req/s':>8} {'out tok/s':>10} {'TTFT med':>9} {'TTFT max':>9} {'seconds':>8}")
    for r in rows:
        print(f"{r['concurrency']:>8} {r['requests_per_s']:>8.2f} {r['output_tokens_per_s']:>10.1f} "
              f"{r['ttft_median_s']:>9.3f} {r['ttft_max_s']:>9.3f} {r['seconds']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
