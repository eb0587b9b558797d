"""The side-by-side tools' start on a machine without their Python packages: one line saying what
to install, not a traceback. `-S` leaves site-packages out, so numpy is missing whatever is installed."""
import subprocess
import sys

from conftest import REPO


def test_gguf_exporter_without_numpy_says_what_to_install(tmp_path):
    r = subprocess.run([sys.executable, "-S", str(REPO / "tools" / "export_gguf_nvfp4.py"), str(tmp_path),
                        str(tmp_path / "out.gguf")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("export_gguf_nvfp4: needs numpy")
    assert "pip install numpy pyyaml" in r.stderr
