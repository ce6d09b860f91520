"""The manifests under k8s/ are valid Kubernetes objects and carry what operators rely on.

No kustomize binary is needed: kustomizations are walked by hand (resources, components, patches,
images), every object is validated with kubernetes-validate in strict mode, and a patch file is
merged the way a strategic-merge patch merges ConfigMaps and Deployments. Fields the walker does not
understand fail the walk, so it cannot silently drift from what `kubectl apply -k` would render.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
WALKED_FIELDS = {"apiVersion", "kind", "resources", "components", "patches", "images"}
# What a strategic-merge patch does with a list (the patchMergeKey of the Kubernetes API types):
# these are merged item by item on the key, these are replaced whole; any other list in a patch
# fails the walk rather than be merged wrongly.
MERGED_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
}
REPLACED_LISTS = {"args", "command", "envFrom"}
PATCHED_KINDS = {"ConfigMap", "Deployment"}
IMAGE_FIELDS = {"name", "newName", "newTag", "digest"}
# The oldest Kubernetes we promise to run on, and the newest schema the validator ships.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())

APP = "aim-realtime"
SECRET_NAME = "aim-realtime-secrets"
CONFIGMAP_NAME = "aim-realtime-config"
# A pod listens on all its interfaces: the kubelet probes and the Service reach it by pod IP.
SERVE_ARGS = ["serve", "--host", "0.0.0.0", "--port", "8080", "--no-worker"]  # noqa: S104
WORKER = "aim-realtime-worker"
SECRET_KEYS = (
    "AIM_AUTH_HS256_SECRET",
    "AIM_LIVEKIT_API_KEY",
    "AIM_LIVEKIT_API_SECRET",
    "AIM_LIVEKIT_WEBHOOK_KEYS",
    "AIM_PROVIDER_TOKEN_SECRET",
)
# Every AIM_* variable the service reads (profile §14 and realtime/settings.py).
KNOWN_AIM_SETTINGS = {
    "AIM_REDIS_URL",
    "AIM_REDIS_CLUSTER",
    "AIM_REQUIRE_REDIS",
    "AIM_DATA_DIR",
    "AIM_PUBLIC_BASE_URL",
    "AIM_AUTH_HS256_SECRET",
    "AIM_AUTH_JWKS_URL",
    "AIM_AUTH_ISSUER",
    "AIM_AUTH_AUDIENCE",
    "AIM_AUTH_TENANT_CLAIM",
    "AIM_AUTH_LEEWAY_S",
    "AIM_LIVEKIT_URL",
    "AIM_LIVEKIT_PUBLIC_URL",
    "AIM_LIVEKIT_API_KEY",
    "AIM_LIVEKIT_API_SECRET",
    "AIM_LIVEKIT_WEBHOOK_KEYS",
    "AIM_AGENT_NAME",
    "AIM_PROVIDER_TOKEN_SECRET",
    "AIM_PROVIDER_CAPABILITIES",
    "AIM_JOIN_TOKEN_TTL_S",
    "AIM_PROVISIONING_TIMEOUT_S",
    "AIM_IDLE_TIMEOUT_S",
    "AIM_RECONNECT_GRACE_S",
    "AIM_MAX_SESSION_S",
    "AIM_REQUIREMENT_TTL_S",
    "AIM_MAX_SESSIONS_PER_PRINCIPAL",
    "AIM_MAX_ENDPOINTS_PER_SESSION",
    "AIM_RATE_LIMIT_RPS",
    "AIM_TASK_TTL_S",
    "AIM_WORKER_LEASE_S",
    "AIM_RECONCILE_INTERVAL_S",
    "AIM_RECONCILE_GRACE_S",
    "AIM_SSE_HEARTBEAT_S",
    "AIM_SSE_BUFFER_EVENTS",
    "AIM_HTTP_IDLE_TIMEOUT_S",
    "AIM_HTTP_REQUEST_TIMEOUT_S",
    "AIM_HTTP_MAX_CONNECTIONS",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}

Obj = dict[str, Any]


# --- walking kustomizations -------------------------------------------------------------------


def kustomization_path(directory: Path) -> Path:
    for name in KUSTOMIZATION_NAMES:
        if (directory / name).is_file():
            return directory / name
    raise AssertionError(f"{directory} is listed as a kustomization but has none")


def load_documents(path: Path) -> list[Obj]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: every YAML document must be a mapping"
    return docs


def load_kustomization(directory: Path) -> Obj:
    (doc,) = load_documents(kustomization_path(directory))
    return doc


def listed_paths(directory: Path) -> list[Path]:
    """Every path a kustomization names, resolved against its directory."""
    kustomization = load_kustomization(directory)
    entries = [*kustomization.get("resources", []), *kustomization.get("components", [])]
    entries += [patch["path"] for patch in kustomization.get("patches", []) if "path" in patch]
    return [(directory / entry).resolve() for entry in entries]


def merge(target: Obj, patch: Obj, where: str) -> None:
    """A strategic-merge patch: maps merge, `null` removes a field, lists as MERGED_LISTS says."""
    for key, value in patch.items():
        assert not key.startswith("$"), f"{where}: the walker does not follow {key} directives"
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value, f"{where}.{key}")
        elif isinstance(value, list) and key in MERGED_LISTS:
            merge_list(target.setdefault(key, []), value, MERGED_LISTS[key], f"{where}.{key}")
        else:
            assert not isinstance(value, list) or key in REPLACED_LISTS, (
                f"{where}.{key}: teach this test how a patch merges this list"
            )
            target[key] = copy.deepcopy(value)


def merge_list(target: list[Obj], patch: list[Obj], key: str, where: str) -> None:
    for item in patch:
        found = [t for t in target if t.get(key) == item[key]]
        if found:
            merge(found[0], item, f"{where}[{item[key]}]")
        else:
            target.append(copy.deepcopy(item))


def apply_patch(objects: list[Obj], patch: Obj) -> None:
    kind, name = patch["kind"], patch["metadata"]["name"]
    assert kind in PATCHED_KINDS, f"the test walker does not merge a {kind} patch"
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"a patch targets {kind}/{name}, which is rendered {len(found)} times"
    assert found[0]["apiVersion"] == patch["apiVersion"], f"{kind}/{name}: apiVersion differs"
    merge(found[0], {k: v for k, v in patch.items() if k != "metadata"}, f"{kind}/{name}")
    merge(found[0]["metadata"], {k: v for k, v in patch["metadata"].items() if k != "name"}, name)


def split_image(image: str) -> tuple[str, str]:
    """`name:tag` or `name@digest` into the name and the rest (with its separator)."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, f"@{digest}"
    name, colon, tag = image.rpartition(":")
    if colon and "/" not in tag:
        return name, f":{tag}"
    return image, ""


def apply_images(objects: list[Obj], images: list[Obj]) -> None:
    """The `images` field: containers whose image name matches get the new name, tag or digest."""
    for entry in images:
        assert set(entry) <= IMAGE_FIELDS, f"teach this test about images fields {sorted(entry)}"
        for workload in workloads(objects):
            for container in containers(workload):
                name, rest = split_image(container["image"])
                if name != entry["name"]:
                    continue
                if "digest" in entry:
                    rest = f"@{entry['digest']}"
                elif "newTag" in entry:
                    rest = f":{entry['newTag']}"
                container["image"] = f"{entry.get('newName', name)}{rest}"


def render(directory: Path, accumulated: list[Obj] | None = None) -> list[Obj]:
    """The objects `kubectl kustomize` would produce for this kustomization (the parts we use).

    A Component works on what its parent has accumulated so far (`accumulated`): its resources
    are added to those objects and its patches may change any of them. Order as kustomize's:
    resources, then components, then this kustomization's patches and images.
    """
    kustomization = load_kustomization(directory)
    unwalked = set(kustomization) - WALKED_FIELDS
    assert not unwalked, f"{directory}: teach this test about {sorted(unwalked)}"
    is_component = kustomization.get("kind") == "Component"
    assert is_component == (accumulated is not None), f"{directory}: Component only in components"
    objects: list[Obj] = accumulated if accumulated is not None else []
    for entry in kustomization.get("resources", []):
        target = directory / entry
        objects += render(target) if target.is_dir() else load_documents(target)
    for entry in kustomization.get("components", []):
        objects = render(directory / entry, objects)
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"{directory}: only file patches are walked, not {patch}"
        for doc in load_documents(directory / patch["path"]):
            apply_patch(objects, doc)
    apply_images(objects, kustomization.get("images", []))
    ids = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(ids) == len(set(ids)), f"{directory}: duplicate objects {sorted(ids)}"
    return objects


def render_alone(directory: Path) -> list[Obj]:
    """A kustomization as applied; a Component as it would be applied on top of the base."""
    if load_kustomization(directory).get("kind") == "Component":
        return render(directory, render(K8S / "base"))
    return render(directory)


def kustomization_dirs() -> list[Path]:
    found = {p.parent for name in KUSTOMIZATION_NAMES for p in K8S.rglob(name)}
    return sorted(found)


ALL_DIRS = kustomization_dirs()
# What can be applied on its own (components only make sense inside one of these).
DEPLOYABLE = [d for d in ALL_DIRS if load_kustomization(d).get("kind") == "Kustomization"]


def rel(path: Path) -> str:
    return str(path.relative_to(K8S))


# --- looking things up ------------------------------------------------------------------------


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Obj) -> list[Obj]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def app_container(objects: list[Obj]) -> Obj:
    (container,) = [c for c in containers(one(objects, "Deployment", APP)) if c["name"] == APP]
    return container


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def pod_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def redis_url_secret(container: Obj) -> tuple[str, str] | None:
    """The (Secret, key) a container reads AIM_REDIS_URL from, when its `env` names one."""
    for env in container.get("env", []):
        if env["name"] == "AIM_REDIS_URL":
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            assert ref is not None, "AIM_REDIS_URL in `env` must come from a Secret"
            assert ref.get("optional", False) is False, "a missing Redis URL must stop the pod"
            return ref["name"], ref["key"]
    return None


def match_labels(selector: Obj) -> dict[str, str]:
    assert "matchExpressions" not in selector, "this test reads matchLabels only"
    labels: dict[str, str] = selector.get("matchLabels", {})
    return labels


def network_policies(objects: list[Obj], labels: dict[str, str], policy_type: str) -> list[Obj]:
    """The NetworkPolicies of `policy_type` that apply to pods with these labels (an empty
    podSelector selects every pod of the namespace)."""
    found = []
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        spec = policy["spec"]
        applies = match_labels(spec["podSelector"]).items() <= labels.items()
        if applies and policy_type in spec["policyTypes"]:
            found.append(policy)
    return found


def rules(policies: list[Obj], direction: str) -> list[Obj]:
    return [rule for policy in policies for rule in policy["spec"].get(direction, [])]


def port_names(workload: Obj) -> set[str]:
    return {p["name"] for c in containers(workload) for p in c.get("ports", []) if "name" in p}


def port_number(workload: Obj, port: str | int) -> int:
    """A port of a rule or Service, by name or number, as the pod's container port."""
    if isinstance(port, int):
        return port
    (number,) = [
        p["containerPort"]
        for c in containers(workload)
        for p in c.get("ports", [])
        if p.get("name") == port
    ]
    return int(number)


def cpu_millis(quantity: str | int) -> int:
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def memory_mib(quantity: str) -> float:
    for suffix, factor in (("Gi", 1024.0), ("Mi", 1.0), ("Ki", 1 / 1024)):
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    raise AssertionError(f"write memory as Ki, Mi or Gi, not {quantity}")


@pytest.fixture(params=DEPLOYABLE, ids=rel)
def objects(request: pytest.FixtureRequest) -> list[Obj]:
    return render(request.param)


# --- the kustomization tree -------------------------------------------------------------------


def test_expected_kustomizations_exist() -> None:
    kinds = {rel(d): load_kustomization(d).get("kind") for d in ALL_DIRS}
    assert kinds.get("base") == "Kustomization"
    assert kinds.get("overlays/dev") == "Kustomization"
    assert kinds.get("components/redis-dev") == "Component"
    assert kinds.get("components/otel-collector") == "Component"
    assert kinds.get("components/prometheus-scrape") == "Component"


@pytest.mark.parametrize("directory", ALL_DIRS, ids=rel)
def test_every_file_listed_in_a_kustomization_exists(directory: Path) -> None:
    for path in listed_paths(directory):
        assert path.exists(), f"{rel(directory)} lists {path}, which does not exist"
        if path.is_dir():
            kustomization_path(path)


def test_every_manifest_file_is_listed_in_a_kustomization() -> None:
    listed = {p for d in ALL_DIRS for p in listed_paths(d)}
    manifests = {
        p.resolve()
        for pattern in ("*.yaml", "*.yml")
        for p in K8S.rglob(pattern)
        if p.name not in KUSTOMIZATION_NAMES
    }
    assert manifests, "no manifests found"
    assert not manifests - listed, f"files no kustomization uses: {sorted(manifests - listed)}"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("directory", ALL_DIRS, ids=rel)
def test_every_object_validates_against_the_kubernetes_schema(
    directory: Path, version: str
) -> None:
    rendered = render_alone(directory)
    assert rendered, f"{rel(directory)} renders no objects"
    for obj in rendered:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            pytest.fail(f"{rel(directory)}: {name} invalid for {version} at {where}: {error}")
        except kubernetes_validate.SchemaNotFoundError as error:
            pytest.fail(f"{rel(directory)}: {error.message}")


def test_every_object_carries_the_recommended_labels(objects: list[Obj]) -> None:
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/part-of"):
            assert key in labels, f"{obj['kind']}/{obj['metadata']['name']} lacks label {key}"


# --- the Deployment ---------------------------------------------------------------------------


def test_deployment_runs_two_replicas_and_keeps_both_during_a_rollout(objects: list[Obj]) -> None:
    """Two replicas, written down or kept by a HorizontalPodAutoscaler (which then owns the count:
    a `replicas` in the manifest would reset it on every apply)."""
    spec = one(objects, "Deployment", APP)["spec"]
    autoscalers = [
        h
        for h in objects
        if h["kind"] == "HorizontalPodAutoscaler" and h["spec"]["scaleTargetRef"]["name"] == APP
    ]
    if autoscalers:
        assert "replicas" not in spec, "the HPA owns the replica count"
        assert all(h["spec"]["minReplicas"] >= 2 for h in autoscalers)
    else:
        assert spec.get("replicas") == 2, "two replicas, or an HPA that keeps at least two"
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert selects(spec["selector"]["matchLabels"], pod_labels(one(objects, "Deployment", APP)))


def test_container_serves_on_the_named_http_port(objects: list[Obj]) -> None:
    container = app_container(objects)
    assert container["args"] == SERVE_ARGS
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.get("http") == 8080


def test_a_worker_deployment_retries_effects_and_fires_timers(objects: list[Obj]) -> None:
    """The HTTP pods run `--no-worker`, so without this Deployment nothing would retry a failed
    LiveKit call or fire a timer."""
    worker = one(objects, "Deployment", WORKER)
    assert worker["spec"]["replicas"] >= 2
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert selects(worker["spec"]["selector"]["matchLabels"], pod_labels(worker))
    (container,) = containers(worker)
    assert container["args"] == ["worker"]
    assert "ports" not in container
    app = app_container(objects)
    assert container["image"] == app["image"]
    assert container["envFrom"] == app["envFrom"]
    assert container.get("env") == app.get("env"), "the worker must read the same settings"
    server = one(objects, "Deployment", APP)
    assert not selects(server["spec"]["selector"]["matchLabels"], pod_labels(worker))


def test_probes_ask_healthz_and_readyz_on_the_named_port(objects: list[Obj]) -> None:
    container = app_container(objects)
    probes = {
        kind: (container[kind]["httpGet"]["path"], container[kind]["httpGet"]["port"])
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes == {
        "startupProbe": ("/healthz", "http"),
        "livenessProbe": ("/healthz", "http"),
        "readinessProbe": ("/readyz", "http"),
    }


def test_every_container_has_resource_requests_and_limits(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        for container in containers(workload):
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    assert resource in resources.get(bound, {}), (
                        f"{workload['metadata']['name']}/{container['name']} has no "
                        f"{bound}.{resource}"
                    )


def test_every_container_runs_unprivileged_on_a_read_only_root(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        pod = pod_spec(workload).get("securityContext", {})
        for container in containers(workload):
            effective = {**pod, **container.get("securityContext", {})}
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert effective.get("runAsNonRoot") is True, where
            assert effective.get("runAsUser", 0) != 0, where
            assert effective.get("readOnlyRootFilesystem") is True, where
            assert effective.get("allowPrivilegeEscalation") is False, where
            assert effective.get("privileged", False) is False, where
            assert "ALL" in effective.get("capabilities", {}).get("drop", []), where
            assert effective.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
    container = app_container(objects)
    app_pod = pod_spec(one(objects, "Deployment", APP)).get("securityContext", {})
    assert {**app_pod, **container["securityContext"]}["runAsUser"] == 10001


def test_writable_paths_are_emptydir_volumes(objects: list[Obj]) -> None:
    deployment = one(objects, "Deployment", APP)
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in app_container(objects)["volumeMounts"]}
    data_dir = one(objects, "ConfigMap", CONFIGMAP_NAME)["data"]["AIM_DATA_DIR"]
    for path in ("/tmp", data_dir):
        assert path in mounts, f"{path} is not mounted"
        assert "emptyDir" in volumes[mounts[path]], f"{path} is not an emptyDir"


def test_pods_spread_across_nodes(objects: list[Obj]) -> None:
    deployment = one(objects, "Deployment", APP)
    spec, labels = pod_spec(deployment), pod_labels(deployment)
    spreads = [
        c
        for c in spec.get("topologySpreadConstraints", [])
        if c["topologyKey"] == "kubernetes.io/hostname"
        and selects(c["labelSelector"]["matchLabels"], labels)
    ]
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    terms = [
        term.get("podAffinityTerm", term)
        for key in (
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        )
        for term in anti.get(key, [])
    ]
    anti_terms = [
        t
        for t in terms
        if t["topologyKey"] == "kubernetes.io/hostname"
        and selects(t["labelSelector"]["matchLabels"], labels)
    ]
    assert spreads or anti_terms, "replicas may all land on one node"


# --- configuration and secrets ----------------------------------------------------------------


def test_secret_is_referenced_by_name_after_the_configmap(objects: list[Obj]) -> None:
    env_from = app_container(objects)["envFrom"]
    sources = [
        ("configMap", s["configMapRef"]["name"])
        if "configMapRef" in s
        else ("secret", s["secretRef"]["name"])
        for s in env_from
    ]
    assert sources == [("configMap", CONFIGMAP_NAME), ("secret", SECRET_NAME)]
    assert env_from[1]["secretRef"].get("optional", False) is False
    one(objects, "ConfigMap", CONFIGMAP_NAME)


def test_no_secret_is_embedded_anywhere_under_k8s() -> None:
    for path in [*K8S.rglob("*.yaml"), *K8S.rglob("*.yml")]:
        for doc in load_documents(path):
            assert doc.get("kind") != "Secret", f"{path} embeds a Secret"
            assert "secretGenerator" not in doc, f"{path} generates a Secret"
    for directory in DEPLOYABLE:
        for workload in workloads(render(directory)):
            for container in containers(workload):
                for env in container.get("env", []):
                    assert env["name"] not in SECRET_KEYS or "value" not in env, (
                        f"{rel(directory)}: {env['name']} is written into the manifest"
                    )


def test_configmap_holds_only_known_aim_and_otel_settings(objects: list[Obj]) -> None:
    data = one(objects, "ConfigMap", CONFIGMAP_NAME)["data"]
    for name in data:
        assert name.startswith(("AIM_", "OTEL_")), f"{name} is not a setting of the service"
        assert not name.startswith("AIM_") or name in KNOWN_AIM_SETTINGS, f"unknown {name}"
        assert name not in SECRET_KEYS, f"{name} is a secret; it belongs in {SECRET_NAME}"
    if redis_url_secret(app_container(objects)) is None:
        assert urlsplit(data["AIM_REDIS_URL"]).scheme in ("redis", "rediss")
    else:
        assert "AIM_REDIS_URL" not in data, (
            "a URL in the ConfigMap would mislead: the Secret's wins"
        )
    assert data.get("AIM_REQUIRE_REDIS") == "1", "replicas must never fall back to a private store"


def test_every_container_env_names_a_known_setting(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        if workload["metadata"]["name"] not in (APP, WORKER):
            continue
        for container in containers(workload):
            for env in container.get("env", []):
                assert env["name"] in KNOWN_AIM_SETTINGS, f"unknown setting {env['name']}"


def test_secret_keys_are_documented_for_operators() -> None:
    readme = (K8S / "README.md").read_text()
    deployment = (K8S / "base" / "deployment.yaml").read_text()
    for text in (readme, deployment):
        assert SECRET_NAME in text
        for key in SECRET_KEYS:
            assert key in text, f"{key} is not documented"


def test_service_account_mounts_no_token(objects: list[Obj]) -> None:
    account = one(objects, "ServiceAccount", APP)
    assert account["automountServiceAccountToken"] is False
    spec = pod_spec(one(objects, "Deployment", APP))
    assert spec["serviceAccountName"] == APP
    assert spec.get("automountServiceAccountToken") is False


# --- traffic and disruption -------------------------------------------------------------------


def test_every_pdb_keeps_one_replica_of_one_deployment(objects: list[Obj]) -> None:
    covered = []
    for pdb in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        assert pdb["spec"]["minAvailable"] == 1
        assert pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
        matched = [
            w["metadata"]["name"]
            for w in workloads(objects)
            if selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(w))
        ]
        assert len(matched) == 1, f"PDB {pdb['metadata']['name']} selects {matched}"
        covered += matched
    assert APP in covered, "the HTTP Deployment has no PodDisruptionBudget"
    assert len(covered) == len(set(covered)), "two PDBs for one Deployment"


def test_every_workload_selects_its_own_pods_only(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        selector = workload["spec"]["selector"]["matchLabels"]
        matched = [
            w["metadata"]["name"] for w in workloads(objects) if selects(selector, pod_labels(w))
        ]
        assert matched == [workload["metadata"]["name"]], f"{selector} selects {matched}"
        for spread in pod_spec(workload).get("topologySpreadConstraints", []):
            assert selects(spread["labelSelector"]["matchLabels"], pod_labels(workload))


def test_every_service_selects_one_workload_on_a_named_port(objects: list[Obj]) -> None:
    for service in (o for o in objects if o["kind"] == "Service"):
        name = service["metadata"]["name"]
        matched = [
            w for w in workloads(objects) if selects(service["spec"]["selector"], pod_labels(w))
        ]
        assert len(matched) == 1, f"Service {name} selects {len(matched)} workloads"
        port_names = {p.get("name") for c in containers(matched[0]) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"Service {name} targets an unnamed port"


def test_every_network_policy_selects_pods_and_their_named_ports(objects: list[Obj]) -> None:
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        name, spec = policy["metadata"]["name"], policy["spec"]
        assert spec.get("policyTypes"), f"NetworkPolicy {name}: write its policyTypes down"
        selector = match_labels(spec["podSelector"])
        targets = [w for w in workloads(objects) if selects(selector, pod_labels(w))]
        assert targets, f"NetworkPolicy {name} selects no pods"
        for rule in spec.get("ingress", []):
            for port in rule.get("ports", []):
                for target in targets:
                    assert not isinstance(port["port"], str) or port["port"] in port_names(
                        target
                    ), f"NetworkPolicy {name}: {target['metadata']['name']} has no port {port}"
        peers = [
            *(peer for rule in spec.get("ingress", []) for peer in rule.get("from", [])),
            *(peer for rule in spec.get("egress", []) for peer in rule.get("to", [])),
        ]
        for peer in peers:
            if "podSelector" in peer and "namespaceSelector" not in peer:
                # a peer in this namespace: it must be something these manifests run
                peer_labels = match_labels(peer["podSelector"])
                assert any(selects(peer_labels, pod_labels(w)) for w in workloads(objects)), (
                    f"NetworkPolicy {name}: no pod matches the peer {peer_labels}"
                )


def test_app_service_is_cluster_internal_on_port_80(objects: list[Obj]) -> None:
    spec = one(objects, "Service", APP)["spec"]
    assert spec.get("type", "ClusterIP") == "ClusterIP"
    assert [(p["port"], p["targetPort"]) for p in spec["ports"]] == [(80, "http")]


def test_dev_overlay_runs_the_redis_the_config_points_at() -> None:
    objects = render(K8S / "overlays" / "dev")
    url = urlsplit(one(objects, "ConfigMap", CONFIGMAP_NAME)["data"]["AIM_REDIS_URL"])
    service = one(objects, "Service", url.hostname or "")
    assert url.port in [p["port"] for p in service["spec"]["ports"]]
    redis = one(objects, "Deployment", "redis")
    args = " ".join(a for c in containers(redis) for a in [*c.get("command", []), *c["args"]])
    assert "--appendonly yes" in args, "the development Redis must keep an append-only file"
