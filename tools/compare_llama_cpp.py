#!/usr/bin/env python3
"""fp4serve and llama.cpp side by side on the same NVFP4 weights, same threads, one run.

    tools/compare_llama_cpp.py CHECKPOINT_DIR [--fp4serve BIN] [-t 2] [-p 512] [-n 128] [-d 0] [-r 3]
                               [--work /tmp/fp4serve-llama] [--json]

1. builds llama-bench from the llama-cpp-python sdist (tools/build_llama_bench.sh; outside the
   repository, never committed);
2. writes CHECKPOINT_DIR as a GGUF with NVFP4 tensors (tools/export_gguf_nvfp4.py) into the work
   directory, unless it is already there and newer than the checkpoint;
3. runs `fp4serve bench` (batch 1, plus any --fp4serve-arg) and `llama-bench` with the same -t/-p/-n/-d/-r, one after the
   other, and prints both with the ratios and the load average around each (the machine may be
   shared: compare ratios from one run, not absolute numbers across runs). Before each engine runs,
   its own weight files are read once (unless --no-warm): a machine whose RAM holds one copy of a
   30B checkpoint but not two would otherwise time the first test of each engine reading its
   weights from disk.
Only the standard library. The exporter needs numpy and PyYAML (gguf-py imports it): where this
Python lacks them they are installed into a venv in the work directory (WORK/export-venv), once.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent


def loadavg() -> float:
    return os.getloadavg()[0]


def warm(paths: list[Path]) -> None:
    """Reads the files once so that the engine about to run finds them in the page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


EXPORTER_MODULES = ["numpy", "yaml"]  # yaml: llama.cpp's gguf-py imports it
EXPORTER_PACKAGES = ["numpy", "pyyaml"]


def has_modules(python: str) -> bool:
    probe = "import " + ", ".join(EXPORTER_MODULES)
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def exporter_python(work: Path) -> str:
    """A Python that can run tools/export_gguf_nvfp4.py: this one, or a venv made for it in the
    work directory (a fresh machine has no numpy). Checked before llama.cpp's build, which takes
    minutes, so a missing module fails at once."""
    if has_modules(sys.executable):
        return sys.executable
    venv = work / "export-venv"
    python = venv / "bin" / "python"
    if python.is_file() and has_modules(str(python)):
        return str(python)
    print(f"+ {' and '.join(EXPORTER_PACKAGES)} missing here: installing them into {venv} for the GGUF exporter",
          file=sys.stderr)
    try:
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *EXPORTER_PACKAGES],
                       check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"error: tools/export_gguf_nvfp4.py needs {' and '.join(EXPORTER_PACKAGES)}, and installing them "
                         f"into {venv} failed ({e}); install them with `python3 -m pip install {' '.join(EXPORTER_PACKAGES)}` "
                         "and run again")
    return str(python)


def run_json(cmd: list[str]) -> object:
    print("+ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    # llama-bench -o json prints one array; fp4serve bench --json one object (last line).
    text = out.strip()
    return json.loads(text if text.startswith("[") else text.splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--fp4serve", default=shutil.which("fp4serve") or "build/release/fp4serve")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-d", "--n-depth", type=int, default=0,
                    help="tokens already in the cache before each test (both engines' -d; llama.cpp keeps them in F16)")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/fp4serve-llama"))
    ap.add_argument("--fp4serve-arg", action="append", default=[],
                    help="extra argument for fp4serve bench, e.g. --fp4serve-arg=--allow-bf16-activations (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--no-warm", action="store_true",
                    help="do not read each engine's weight files into the page cache before its run")
    args = ap.parse_args()
    if not (args.checkpoint / "config.json").is_file():
        print(f"error: {args.checkpoint} has no config.json", file=sys.stderr)
        return 1
    if not Path(args.fp4serve).is_file():
        print(f"error: fp4serve binary {args.fp4serve} not found (--fp4serve PATH)", file=sys.stderr)
        return 1

    python = exporter_python(args.work)
    llama_bench = subprocess.run([str(TOOLS / "build_llama_bench.sh"), str(args.work)], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    gguf_path = args.work / (args.checkpoint.resolve().name + ".nvfp4.gguf")
    newest = max(p.stat().st_mtime for p in args.checkpoint.iterdir())
    if not gguf_path.exists() or gguf_path.stat().st_mtime < newest:
        # The gguf-py of the sdist build_llama_bench.sh unpacked into this work directory.
        gguf_py = sorted(args.work.glob("llama_cpp_python-*/vendor/llama.cpp/gguf-py"))
        if not gguf_py:
            print(f"error: no llama.cpp gguf-py under {args.work} after tools/build_llama_bench.sh", file=sys.stderr)
            return 1
        subprocess.run([python, str(TOOLS / "export_gguf_nvfp4.py"), str(args.checkpoint), str(gguf_path),
                        "--gguf-py", str(gguf_py[-1])], check=True)

    common = ["-t", str(args.threads), "-p", str(args.n_prompt), "-n", str(args.n_gen), "-d", str(args.n_depth)]
    if not args.no_warm:
        warm(sorted(args.checkpoint.glob("*.safetensors")))
    load_before = loadavg()
    ours = run_json([args.fp4serve, "bench", "-m", str(args.checkpoint), *common, "--reps", str(args.reps),
                     "--batch", "1", "--json", *args.fp4serve_arg])
    if not args.no_warm:
        warm([gguf_path])
    load_mid = loadavg()
    theirs = run_json([llama_bench, "-m", str(gguf_path), *common, "-r", str(args.reps), "-o", "json"])
    load_after = loadavg()

    rows = []
    for test in ours["tests"]:
        kind = test["test"][:2]
        mine = test["tokens_per_s"]["median"]
        other = None
        for t in theirs:
            if t.get("n_depth", 0) != args.n_depth:
                continue
            if kind == "pp" and t.get("n_prompt") == args.n_prompt and t.get("n_gen") == 0:
                other = t["avg_ts"]
            if kind == "tg" and t.get("n_gen") == args.n_gen and t.get("n_prompt") == 0:
                other = t["avg_ts"]
        rows.append({"test": test["test"], "fp4serve_tps": mine, "llama_cpp_tps": other,
                     "ratio": mine / other if other else None})
    result = {
        "checkpoint": str(args.checkpoint), "gguf": str(gguf_path), "threads": args.threads,
        "fp4serve_args": args.fp4serve_arg, "fp4serve_kernels": {f["family"]: f.get("chosen") for f in ours["kernels"].get("families", [])},
        "load_average": {"before": load_before, "between": load_mid, "after": load_after},
        "bandwidth_gb_per_s": ours["roofline"]["bandwidth_gb_per_s"],
        "bandwidth_basis": ours["roofline"]["bandwidth_basis"],
        "roofline_tokens_per_s": ours["roofline"]["decode_tokens_per_s"],
        "tg_batch1_fraction_of_roofline": ours["roofline"]["tg_batch1_fraction"],
        # At a depth, against the roofline that counts the cached keys and values too.
        "tg_batch1_fraction_of_roofline_with_kv": ours["roofline"]["tg_batch1_fraction_with_kv_at_depth"],
        "llama_cpp_build": theirs[0].get("build_commit") if theirs else None,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.checkpoint} | threads {args.threads} | reps {args.reps} | load average "
          f"{load_before:.1f} / {load_mid:.1f} / {load_after:.1f} (before / between / after)")
    print(f"fp4serve {' '.join(args.fp4serve_arg) or '(auto backends)'}: {result['fp4serve_kernels']}")
    print(f"memory read bandwidth {result['bandwidth_gb_per_s']:.1f} GB/s ({result['bandwidth_basis']}); decode roofline "
          f"{result['roofline_tokens_per_s']:.1f} tokens/s, fp4serve's tg at "
          f"{100 * result['tg_batch1_fraction_of_roofline']:.1f} % of it"
          + (f" ({100 * result['tg_batch1_fraction_of_roofline_with_kv']:.1f} % counting the cache)" if args.n_depth else "")
          + f"; llama.cpp build {result['llama_cpp_build']}")
    print("| test | fp4serve t/s | llama.cpp t/s | fp4serve / llama.cpp |")
    print("|---|---:|---:|---:|")
    for r in rows:
        other = f"{r['llama_cpp_tps']:.2f}" if r["llama_cpp_tps"] else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        print(f"| {r['test']} | {r['fp4serve_tps']:.2f} | {other} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
