"""The package built against an installed libtokenkv (cmake --install), found by pkg-config alone."""
import os
import shutil
import subprocess
import sys

from conftest import REPO, STORIES

BUILD = os.environ.get("TKV_BUILD_DIR") or os.path.join(REPO, "build")


def test_build_against_the_installed_library(tmp_path):
    prefix, src, out = tmp_path / "prefix", tmp_path / "src", tmp_path / "out"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)], check=True, capture_output=True)
    # a copy of python/ with no build tree beside it: only pkg-config can find the library
    shutil.copytree(os.path.join(REPO, "python"), src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                                    "__pycache__"))
    libdir = next(p for p in prefix.iterdir() if p.name.startswith("lib"))
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    for k in ("TOKENKV_INCLUDE_DIR", "TOKENKV_LIB_DIR", "TOKENKV_BUILD_DIR", "PYTHONPATH"):
        env.pop(k, None)
    subprocess.run([sys.executable, str(src / "tokenkv_build.py"), str(out)], check=True, env=env, cwd=tmp_path)
    probe = ("import tokenkv; m = tokenkv.Model(%r); print(m.n_vocab); "
             "print([l.split()[-1] for l in open('/proc/self/maps') if 'libtokenkv' in l][0])" % STORIES)
    env["PYTHONPATH"] = f"{out}:{src}"
    res = subprocess.run([sys.executable, "-c", probe], check=True, env=env, capture_output=True, text=True, cwd=tmp_path)
    n_vocab, loaded = res.stdout.split()
    assert n_vocab == "512"
    assert os.path.realpath(loaded).startswith(os.path.realpath(libdir))
