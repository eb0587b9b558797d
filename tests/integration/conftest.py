"""Fixtures that start the real `fp4serve serve` binary on a tiny synthetic checkpoint.

FP4SERVE_BINARY  the binary (default: build/release/fp4serve)
FP4SERVE_MODEL   a checkpoint directory (default: one written with `fp4serve synth --preset tiny`)
"""
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("FP4SERVE_BINARY", REPO / "build" / "release" / "fp4serve"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=30):
    """(status, parsed JSON or text) without raising on HTTP errors."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def run_together(n, fn, timeout=300):
    """Calls fn(i) for i in range(n) from n threads released at the same moment; returns the
    results in order. Any exception fails the caller's test with the index of its thread."""
    results, errors = [None] * n, []
    barrier = threading.Barrier(n)

    def run(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as e:  # reported below with the index
            errors.append((i, e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not errors, errors
    return results


class Server:
    def __init__(self, model_dir, log_dir, *extra, port=None):
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / f"serve-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(BINARY), "serve", "-m", str(model_dir), "--port", str(self.port), *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fp4serve serve exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                if http("GET", self.base + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become ready:\n" + self.log_text())

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text()

    def metric(self, name):
        """The value of an unlabelled metric from /metrics."""
        status, text = http("GET", self.base + "/metrics")
        assert status == 200
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    given = os.environ.get("FP4SERVE_MODEL")
    if given:
        return Path(given)
    assert BINARY.exists(), f"{BINARY} not built (set FP4SERVE_BINARY)"
    out = tmp_path_factory.mktemp("tiny-model")
    subprocess.run([str(BINARY), "synth", "--out", str(out), "--preset", "tiny", "--quiet", "--force"],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def server(model_dir, tmp_path_factory):
    s = Server(model_dir, tmp_path_factory.mktemp("logs"), "--max-model-len", "512", "--served-model-name", "tiny")
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture
def start_server(model_dir, tmp_path):
    """Starts a dedicated server with extra flags; stops it after the test."""
    started = []

    def start(*extra):
        s = Server(model_dir, tmp_path, "--served-model-name", "tiny", *extra)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)
