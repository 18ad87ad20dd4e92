"""The wheel: build it, install it into a clean venv, import every package from there."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_into_a_clean_venv_and_imports(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(ROOT)], check=True, timeout=300)
    wheel = next(dist.glob("revive-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "revive/signatures/catalog/signatures.yaml" in names
    assert not any(n.startswith("tests/") for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    # the wheel goes in the clean venv; its dependencies are borrowed from this environment (no network)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code = ("import revive, workflows, activities, worker, runbooks, cli.main, worker.main, "
            "revive.signatures.matcher as m; assert m.default_matcher().match('NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.');"
            "import sys; [print(x.__file__) for x in (revive, workflows, activities, worker, runbooks)]")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        assert str(site) in line and str(ROOT) not in line, line
