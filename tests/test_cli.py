"""The `gradcomp` command, run as a user runs it."""
import json
import subprocess
import sys

import gradcomp


def run(*args):
    return subprocess.run([sys.executable, "-m", "gradcomp.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_compressors_table_lists_every_method():
    out = run("compressors", "--numel", "4096", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    for name in gradcomp.names():
        assert f"\n{name} " in out.stdout
    assert "bytes on wire" in out.stdout


def test_compressors_json_has_exact_bytes():
    out = run("compressors", "--numel", "4096", "--repeats", "1", "--json")
    rows = json.loads(out.stdout)
    assert [r["method"] for r in rows] == gradcomp.names()
    for r in rows:
        assert r["bytes_sent"] == gradcomp.compressor(r["method"]).wire_nbytes(4096)
        assert r["encode_s"] >= 0 and r["decode_s"] >= 0


def test_unknown_command_is_an_error_naming_the_choices():
    out = run("compress")
    assert out.returncode != 0 and "compressors" in out.stderr
