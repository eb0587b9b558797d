"""bench/serve_bench.py against the real server: the tokens its rows count, waiting for a server
that is still starting, and one-line errors that name the URL or the flag."""
import json
import subprocess
import sys
import time

from conftest import REPO, Server, free_port

SCRIPT = REPO / "bench" / "serve_bench.py"


def bench(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_rows_count_every_requested_token(server):
    r = bench("--base-url", server.base, "--requests", "3", "--max-tokens", "4", "--concurrency", "1,2", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["concurrency"] for row in rows] == [1, 2]
    for row in rows:
        assert row["requests"] == 3
        assert row["output_tokens"] == 12  # ignore_eos: every request runs to max_tokens
        assert 0 < row["ttft_median_s"] <= row["ttft_max_s"] <= row["seconds"]


def test_table_names_the_model_it_found(server):
    r = bench("--base-url", server.base, "--requests", "1", "--max-tokens", "2", "--concurrency", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("model tiny, 1 requests per level, 2 output tokens each\n")
    assert r.stdout.splitlines()[2].split()[0] == "1"


def test_waits_for_a_server_that_starts_later(model_dir, tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--base-url", f"http://127.0.0.1:{port}", "--requests", "2",
                             "--max-tokens", "3", "--concurrency", "1", "--json", "--wait-seconds", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()  # nothing listens yet: still waiting
    srv = Server(model_dir, tmp_path, "--served-model-name", "tiny", port=port)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        assert srv.stop() == 0, srv.log_text()
    assert proc.returncode == 0, err
    assert f"serve_bench: waiting for http://127.0.0.1:{port}/v1/models" in err
    assert json.loads(out.splitlines()[0])["output_tokens"] == 6


def test_nothing_listening_ends_in_one_line_naming_the_url():
    port = free_port()
    r = bench("--base-url", f"http://127.0.0.1:{port}", "--wait-seconds", "0.5", timeout=60)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"serve_bench: GET http://127.0.0.1:{port}/v1/models: not ready after 0.5 s" in r.stderr


def test_a_wrong_api_key_is_named(start_server):
    srv = start_server("--api-key", "secret")
    r = bench("--base-url", srv.base, "--api-key", "wrong", "--wait-seconds", "5")
    assert r.returncode == 2
    assert "HTTP 401 (wrong or missing --api-key?)" in r.stderr and "Traceback" not in r.stderr
    r = bench("--base-url", srv.base, "--api-key", "secret", "--requests", "1", "--max-tokens", "2", "--concurrency",
              "1", "--json")
    assert r.returncode == 0, r.stderr


def test_a_failing_request_ends_the_run_with_status_1(server):
    r = bench("--base-url", server.base, "--model", "no-such-model", "--requests", "1", "--max-tokens", "2",
              "--concurrency", "1")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"serve_bench: a request to {server.base} at 1 streams failed: HTTP/1.1 404" in r.stderr
    assert "no-such-model" in r.stderr


def test_bad_arguments_name_the_flag():
    for args, flag in [(["--concurrency", "0,2"], "--concurrency"), (["--concurrency", "a"], "--concurrency"),
                       (["--requests", "0"], "--requests"), (["--max-tokens", "x"], "--max-tokens"),
                       (["--base-url", "localhost:80"], "--base-url")]:
        r = bench(*args, timeout=60)
        assert r.returncode == 2, args
        assert flag in r.stderr.splitlines()[-1], (args, r.stderr)
