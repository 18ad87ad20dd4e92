"""charts/revive rendered by the real Helm engine (Helm v4's Go SDK through ``helm-python-sdk``'s
``libhelm_c``, offline: no cluster, no ``helm`` binary), for the default values and both value sets
in ``charts/revive/ci/``. The rendered cluster.yaml and policy.yaml are validated with Revive's own
models, so the chart cannot drift from ``revive/config.py`` and ``revive/policy.py``."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

helm = pytest.importorskip(
    "helm_python", reason="the Helm engine comes from PyPI: pip install helm-python-sdk==0.2.2"
)

from revive.config import parse_cluster_config  # noqa: E402
from revive.policy import parse_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "revive"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
SECRETS_DIR = "/etc/revive/secrets"
CONFIG_DIR = "/etc/revive/config"


def _values(name: str | None) -> dict:
    return {} if name is None else yaml.safe_load((CHART / "ci" / name).read_text())


def render(values: dict | None = None, name: str = "rv", namespace: str = "ops") -> list[dict]:
    """Every rendered object (NOTES.txt left out)."""
    chart = helm.Chart.load(str(CHART))
    out = chart.render(values or None, name=name, namespace=namespace, is_install=True)
    objs: list[dict] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        objs += [d for d in yaml.safe_load_all(text) if d]
    return objs


def notes(values: dict | None = None) -> str:
    out = helm.Chart.load(str(CHART)).render(values or None, name="rv", namespace="ops")
    return out["revive/templates/NOTES.txt"]


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in by_kind(objs, kind)])
    return found[0]


def config_files(objs: list[dict]) -> tuple[dict, dict]:
    cm = one(objs, "ConfigMap", "rv-revive-config")
    return yaml.safe_load(cm["data"]["cluster.yaml"]), yaml.safe_load(cm["data"]["policy.yaml"])


def workloads(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in ("Deployment", "DaemonSet")]


def container(obj: dict) -> dict:
    (c,) = obj["spec"]["template"]["spec"]["containers"]
    return c


def monitors(objs: list[dict]) -> list[dict]:
    return sorted((o for o in by_kind(objs, "Deployment") if "-monitor-" in o["metadata"]["name"]),
                  key=lambda o: int(o["metadata"]["name"].rsplit("-", 1)[1]))


VALUE_SETS = [None, *[p.name for p in CI_VALUES]]


def test_ci_value_sets_exist():
    assert [p.name for p in CI_VALUES] == ["in-cluster-rest-values.yaml", "remote-ssh-values.yaml"]


@pytest.mark.parametrize("values", VALUE_SETS)
def test_lint_strict_clean(values):
    report = helm.lint(str(CHART), _values(values), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rendered_config_is_valid_for_revive(values):
    cluster, policy = config_files(render(_values(values)))
    cfg = parse_cluster_config(cluster, source="rendered cluster.yaml")
    pol = parse_policy(policy, source="rendered policy.yaml")
    assert cfg.audit_file.startswith("/var/lib/revive/") and cfg.state_dir.startswith("/var/lib/revive/")
    assert pol.mode.value == "observe"


def test_default_objects():
    objs = render()
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs)
    assert kinds == [
        ("ConfigMap", "rv-revive-config"),
        ("Deployment", "rv-revive-monitor-0"),
        ("Deployment", "rv-revive-worker"),
        ("Service", "rv-revive-monitor-metrics"),
        ("Service", "rv-revive-worker-metrics"),
        ("ServiceAccount", "rv-revive"),
    ]
    worker = one(objs, "Deployment", "rv-revive-worker")
    # --policy: the worker creates/updates the return-to-service Schedule from it
    assert container(worker)["args"] == ["worker", "--config", f"{CONFIG_DIR}/cluster.yaml",
                                         "--policy", f"{CONFIG_DIR}/policy.yaml"]
    assert "command" not in container(worker)  # the image's entrypoint is `revive`
    cm = one(objs, "ConfigMap", "rv-revive-config")
    assert "policy.yaml" in cm["data"]  # the file the worker's --policy names, in its mounted config dir
    mounted = {m["mountPath"] for m in container(worker)["volumeMounts"]}
    assert CONFIG_DIR in mounted
    (mon,) = monitors(objs)
    assert mon["spec"]["replicas"] == 1
    assert container(mon)["args"] == ["monitor", "--config", f"{CONFIG_DIR}/cluster.yaml",
                                      "--policy", f"{CONFIG_DIR}/policy.yaml"]


@pytest.mark.parametrize("shards", [2, 3, 5])
def test_monitor_shards(shards):
    objs = render({"monitor": {"shards": shards}})
    mons = monitors(objs)
    assert [m["metadata"]["name"] for m in mons] == [f"rv-revive-monitor-{i}" for i in range(shards)]
    selectors = set()
    for i, m in enumerate(mons):
        assert m["spec"]["replicas"] == 1
        assert m["spec"]["strategy"]["type"] == "Recreate"
        args = container(m)["args"]
        assert args[args.index("--shard") + 1] == f"{i}/{shards}"
        sel = m["spec"]["selector"]["matchLabels"]
        assert sel.items() <= m["spec"]["template"]["metadata"]["labels"].items()
        selectors.add(tuple(sorted(sel.items())))
    assert len(selectors) == shards  # no Deployment adopts another shard's pods


def test_zero_shards_refused():
    with pytest.raises(helm.HelmError, match="monitor.shards"):
        render({"monitor": {"shards": 0}})


@pytest.mark.parametrize("values", VALUE_SETS)
def test_security_context_everywhere(values):
    objs = render(_values(values))
    assert workloads(objs)
    for w in workloads(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["automountServiceAccountToken"] is False
        assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc.get("privileged", False) is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts  # HOME and temp files on the read-only root
        vols = {v["name"] for v in spec["volumes"]}
        for c in spec["containers"]:
            assert {m["name"] for m in c["volumeMounts"]} <= vols


def _secret_paths(cluster: dict) -> list[str]:
    """Every file path in the rendered cluster config that the chart fills from a Secret."""
    sched = cluster.get("scheduler", {})
    paths = []
    if "ssh" in sched:
        paths += [sched["ssh"]["key_file"], sched["ssh"]["known_hosts"]]
    if "rest" in sched:
        paths.append(sched["rest"]["token_file"])
    tls = cluster.get("temporal", {}).get("tls")
    if tls:
        paths += [v for k, v in tls.items() if k.endswith("_file")]
    return paths


@pytest.mark.parametrize("values", VALUE_SETS)
def test_secret_files_are_mounted_from_the_referenced_secret(values):
    vals = _values(values)
    objs = render(vals)
    cluster, _ = config_files(objs)
    paths = _secret_paths(cluster)
    assert paths, "every value set references at least one Secret"
    for w in (o for o in by_kind(objs, "Deployment")):
        spec = w["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = container(w)["volumeMounts"]
        for path in paths:
            assert path.startswith(SECRETS_DIR + "/")
            (m,) = [m for m in mounts if path.startswith(m["mountPath"].rstrip("/") + "/")]
            assert m.get("readOnly") is True
            secret = vols[m["name"]]["secret"]
            assert secret["secretName"]
            assert secret["defaultMode"] == 0o440
            rel = path[len(m["mountPath"]) + 1:]
            assert rel in {i["path"] for i in secret["items"]}


def test_referenced_secret_names_follow_values():
    vals = _values("remote-ssh-values.yaml")
    objs = render(vals)
    names = {v["secret"]["secretName"] for v in one(objs, "Deployment", "rv-revive-worker")["spec"]["template"]
             ["spec"]["volumes"] if "secret" in v}
    assert names == {"revive-ssh", "revive-temporal-tls"}
    vals = _values("in-cluster-rest-values.yaml")
    objs = render(vals)
    names = {v["secret"]["secretName"] for v in one(objs, "Deployment", "rv-revive-worker")["spec"]["template"]
             ["spec"]["volumes"] if "secret" in v}
    assert names == {"revive-slurmrestd-jwt", "slurm-munge-key"}


_SECRET_TEXT = re.compile(r"PRIVATE KEY|BEGIN CERTIFICATE|eyJ[A-Za-z0-9_-]{10,}\.")


@pytest.mark.parametrize("values", VALUE_SETS)
def test_no_inline_secret(values):
    objs = render(_values(values))
    assert by_kind(objs, "Secret") == []
    text = yaml.safe_dump_all(objs)
    assert not _SECRET_TEXT.search(text)
    cluster, _ = config_files(objs)
    sched = cluster["scheduler"]
    assert "key_env" not in sched.get("ssh", {}) and "token_env" not in sched.get("rest", {})
    for w in workloads(objs):
        for e in container(w).get("env", []):
            assert "secretKeyRef" not in e.get("valueFrom", {}), e  # secrets come as files only


@pytest.mark.parametrize("override, message", [
    ({"cluster": {"scheduler": {"ssh": {"key_env": "REVIVE_SSH_KEY"}}}}, "ssh.key_env"),
    ({"cluster": {"scheduler": {"ssh": {"key_file": "/root/.ssh/id_rsa"}}}}, "ssh.key_file"),
    ({"cluster": {"scheduler": {"rest": {"url": "http://r:6820", "token_env": "T"}}},
      "secrets": {"slurmrestdToken": {"existingSecret": "jwt"}}}, "rest.token_env"),
    ({"cluster": {"scheduler": {"rest": {"url": "http://r:6820"}}}}, "slurmrestdToken.existingSecret"),
    ({"secrets": {"sshKey": {"existingSecret": ""}}}, "sshKey.existingSecret"),
    ({"secrets": {"knownHosts": {"existingSecret": ""}}}, "knownHosts.existingSecret"),
    ({"cluster": {"temporal": {"address": "x:7233"}}}, "cluster.temporal"),
    ({"cluster": {"scheduler": {"mode": "local", "ssh": None}}}, "slurmClient.enabled"),
    ({"slurmClient": {"enabled": True, "slurmConf": {"existingConfigMap": "s"}},
      "secrets": {"mungeKey": {"existingSecret": "m"}}}, "mode local"),
    ({"worker": {"replicas": 2}}, "ReadWriteMany"),
    ({"agent": {"enabled": True, "runtimeClassName": ""}}, "runtimeClassName"),
])
def test_refused_values(override, message):
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(override)


def test_service_monitor_only_when_enabled():
    assert by_kind(render(), "ServiceMonitor") == []
    objs = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
                   "agent": {"enabled": True}})
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["namespaceSelector"]["matchNames"] == ["ops"]
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    selected = [s for s in by_kind(objs, "Service")
                if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert sorted(s["metadata"]["name"] for s in selected) == [
        "rv-revive-agent-metrics", "rv-revive-monitor-metrics", "rv-revive-worker-metrics"]


@pytest.mark.parametrize("values", VALUE_SETS)
def test_services_select_their_pods_on_the_metrics_port(values):
    vals = _values(values)
    objs = render(vals)
    pods = {(w["metadata"]["name"]): w for w in workloads(objs)}
    for svc in by_kind(objs, "Service"):
        sel = svc["spec"]["selector"]
        matched = [w for w in pods.values() if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert matched, svc["metadata"]["name"]
        (port,) = svc["spec"]["ports"]
        assert port["name"] == "metrics" and port["targetPort"] == "metrics"
        for w in matched:
            ports = {p["name"]: p["containerPort"] for p in container(w)["ports"]}
            assert ports["metrics"] == port["port"]
            env = {e["name"]: e.get("value") for e in container(w)["env"]}
            assert env["REVIVE_METRICS_PORT"] == str(port["port"])


def test_metrics_port_from_values():
    objs = render({"metrics": {"port": 9555}})
    for w in by_kind(objs, "Deployment"):
        assert container(w)["ports"] == [{"name": "metrics", "containerPort": 9555, "protocol": "TCP"}]
    off = render({"metrics": {"enabled": False}})
    assert by_kind(off, "Service") == []
    assert all("ports" not in container(w) for w in by_kind(off, "Deployment"))


def test_agent_daemonset():
    objs = render(_values("remote-ssh-values.yaml"))
    ds = one(objs, "DaemonSet", "rv-revive-agent")
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["hostPID"] is False
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    c = container(ds)
    assert c["args"] == ["agent"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["REVIVE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # NVML without taking a GPU away from training: no GPU in requests or limits
    assert not any("nvidia.com" in k for part in c["resources"].values() for k in part)
    assert by_kind(render(), "DaemonSet") == []


def test_remote_ssh_value_set():
    objs = render(_values("remote-ssh-values.yaml"))
    cluster, policy = config_files(objs)
    assert cluster["scheduler"]["mode"] == "ssh"
    assert cluster["logs"]["over_ssh"] is True and cluster["kernel_log"]["over_ssh"] is True
    assert cluster["temporal"]["tls"]["ca_file"] == f"{SECRETS_DIR}/temporal-tls/ca.crt"
    assert policy["partition_modes"] == {"gpu-canary": "auto"}
    assert len(monitors(objs)) == 3
    worker = one(objs, "Deployment", "rv-revive-worker")
    assert "command" not in container(worker)  # no Slurm client in the pod
    vols = {v["name"]: v for v in worker["spec"]["template"]["spec"]["volumes"]}
    assert vols["state"] == {"name": "state", "persistentVolumeClaim": {"claimName": "revive-state"}}
    for m in monitors(objs):  # the monitors' offsets cache is per shard, never the shared claim
        mvols = {v["name"]: v for v in m["spec"]["template"]["spec"]["volumes"]}
        assert mvols["state"] == {"name": "state", "emptyDir": {}}
        assert "--ui" in container(m)["args"]


def test_in_cluster_rest_value_set():
    objs = render(_values("in-cluster-rest-values.yaml"))
    cluster, _ = config_files(objs)
    assert cluster["scheduler"]["mode"] == "local"
    assert "ssh" not in cluster["scheduler"] and "kernel_log" not in cluster
    assert cluster["scheduler"]["rest"]["token_file"] == f"{SECRETS_DIR}/slurmrestd/token"
    assert cluster["slurm_conf"] == "/etc/slurm/slurm.conf"
    for w in by_kind(objs, "Deployment"):
        c = container(w)
        spec = w["spec"]["template"]["spec"]
        assert len(spec["containers"]) == 1  # no sidecar: munged runs in the same container
        assert c["command"][:2] == ["/bin/sh", "-ec"]
        script = c["command"][2]
        assert "munged" in script and f"--key-file={SECRETS_DIR}/munge-key/munge.key" in script
        assert script.rstrip().endswith('exec revive "$@"')
        assert c["args"][0] in ("worker", "monitor")
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols[mounts["/run/munge"]["name"]]["emptyDir"] == {"medium": "Memory"}
        conf = vols[mounts["/etc/slurm"]["name"]]["configMap"]
        assert conf["name"] == "slurm-config" and conf["items"] == [{"key": "slurm.conf", "path": "slurm.conf"}]
        assert mounts["/shared"]["readOnly"] is True
        assert vols["shared"]["persistentVolumeClaim"]["claimName"] == "training-shared"
    assert [container(m)["args"][-2:] for m in monitors(objs)] == [["--shard", "0/2"], ["--shard", "1/2"]]


def test_config_change_rolls_the_pods():
    def checksums(objs):
        return {w["metadata"]["name"]: w["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for w in by_kind(objs, "Deployment")}

    a = checksums(render())
    b = checksums(render({"policy": {"mode": "auto"}}))
    assert a.keys() == b.keys() and all(a[k] != b[k] for k in a)


def test_notes_name_the_secrets_to_create():
    text = notes()
    assert "create secret generic revive-ssh --from-file=id_ed25519=" in text
    assert "emptyDir" in text  # the warning without persistence
    text = notes(_values("in-cluster-rest-values.yaml"))
    assert "revive-slurmrestd-jwt" in text and "slurm-munge-key" in text and "AdminLevel=Operator" in text


# ---- structure, independent of the engine's output -------------------------------------------

_VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def test_every_values_reference_exists_in_values_yaml():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []
    for tpl in sorted((CHART / "templates").iterdir()):
        for m in _VALUES_REF.finditer(tpl.read_text()):
            node = values
            for part in m.group(1).strip(".").split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(f"{tpl.name}: .Values{m.group(1)}")
                    break
                node = node[part]
    assert missing == []


def test_chart_metadata():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "revive" and meta["type"] == "application"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{meta["appVersion"]}"' in pyproject  # appVersion follows the package
    loaded = helm.Chart.load(str(CHART))
    assert loaded.name == "revive" and loaded.version == meta["version"]


def test_default_values_are_not_mutated_by_render():
    before = copy.deepcopy(_values("remote-ssh-values.yaml"))
    vals = _values("remote-ssh-values.yaml")
    render(vals)
    assert vals == before


# ---- the in-pod munged wrapper, run for real -------------------------------------------------

@pytest.mark.skipif(shutil.which("munged") is None or shutil.which("setpriv") is None or os.geteuid() != 0,
                    reason="needs munged and unmunge (apt-get install munge), setpriv and root (to act as the pod's uid)")
def test_in_pod_munged_wrapper_starts_munged_then_execs_revive():
    """The rendered command of the in-cluster value set, with its two absolute folders moved into a
    temp dir laid out like kubelet does (Secret file root:fsGroup 0440, emptyDir setgid 2777),
    run as the pod's uid/gid: munged must start and ``revive`` get the container args."""
    vals = _values("in-cluster-rest-values.yaml")
    objs = render(vals)
    c = container(one(objs, "Deployment", "rv-revive-worker"))
    pod = one(objs, "Deployment", "rv-revive-worker")["spec"]["template"]["spec"]["securityContext"]
    uid, gid = pod["runAsUser"], pod["fsGroup"]
    base = Path(tempfile.mkdtemp(prefix="revive-munge-"))
    try:
        base.chmod(0o755)
        secrets, run, bin_dir = base / "secrets", base / "run", base / "bin"
        key = secrets / "munge-key" / "munge.key"
        key.parent.mkdir(parents=True)
        key.write_bytes(os.urandom(1024))
        os.chown(key, 0, gid)
        key.chmod(0o440)
        run.mkdir()
        os.chown(run, 0, gid)
        run.chmod(0o2777)
        bin_dir.mkdir()
        sock = run / "munge.socket.2"
        fake = bin_dir / "revive"  # stands in for the image's entrypoint
        fake.write_text(f'#!/bin/sh\necho "ARGS: $*"\nmunge -n -S {sock} | unmunge -S {sock}\n')
        fake.chmod(0o755)
        script = c["command"][2].replace("/run/munge", str(run)).replace(SECRETS_DIR, str(secrets))
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                *c["command"][:2], script, *c["command"][3:], *c["args"]]
        env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(base)}
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        log = (run / "munged.log").read_text() if (run / "munged.log").exists() else ""
        assert out.returncode == 0, out.stdout + out.stderr + log
        assert f"ARGS: worker --config {CONFIG_DIR}/cluster.yaml --policy {CONFIG_DIR}/policy.yaml" in out.stdout
        assert "STATUS:          Success (0)" in out.stdout, out.stdout + log
    finally:
        if (base / "run" / "munge.socket.2").exists():
            subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                            "munged", "--stop", "-S", str(base / "run" / "munge.socket.2")],
                           capture_output=True, timeout=30)
        shutil.rmtree(base, ignore_errors=True)
