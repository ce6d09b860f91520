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
    "AIM_PROVIDER_BASE_URL",
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
    assert kinds.get("overlays/prod") == "Kustomization"
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


# --- production (overlays/prod) ---------------------------------------------------------------

PROD = K8S / "overlays" / "prod"
REDIS_SECRET = "aim-realtime-redis"
COLLECTOR = "otel-collector"
# The paths the public may reach; /livekit/webhook only when LiveKit calls in from outside.
PUBLIC_PATHS = {
    "/a2a",
    "/.well-known/agent-card.json",
    "/.well-known/agent.json",
    "/sdk",
    "/livekit/webhook",
}
PRIVATE_PREFIXES = ("/ops", "/metrics", "/provider")
RESTART = "rollout restart deployment/aim-realtime deployment/aim-realtime-worker"
# overlays/prod as shipped, and with each optional component it mentions added
PROD_VARIANTS = {"prod": [], "prod+prometheus-scrape": ["prometheus-scrape"]}


@pytest.fixture(params=sorted(PROD_VARIANTS), scope="module")
def prod(request: pytest.FixtureRequest) -> list[Obj]:
    objects = render(PROD)
    for component in PROD_VARIANTS[request.param]:
        objects = render(K8S / "components" / component, objects)
    return objects


def test_prod_variants_validate_against_the_kubernetes_schema(prod: list[Obj]) -> None:
    for version in KUBERNETES_VERSIONS:
        for obj in prod:
            kubernetes_validate.validate(obj, version, strict=True)


def labels_of(objects: list[Obj], name: str) -> dict[str, str]:
    return pod_labels(one(objects, "Deployment", name))


def prod_container(objects: list[Obj], name: str) -> Obj:
    (container,) = containers(one(objects, "Deployment", name))
    return container


def test_prod_reads_a_redis_cluster_url_from_a_secret(prod: list[Obj]) -> None:
    for name in (APP, WORKER):
        source = redis_url_secret(prod_container(prod, name))
        assert source == (REDIS_SECRET, "AIM_REDIS_URL"), (
            f"{name} reads the Redis URL from {source}"
        )
    data = one(prod, "ConfigMap", CONFIGMAP_NAME)["data"]
    assert "AIM_REDIS_URL" not in data
    assert data["AIM_REDIS_CLUSTER"] == "1"
    assert data["AIM_REQUIRE_REDIS"] == "1"
    # a managed Redis Cluster is assumed: nothing here runs one
    for workload in workloads(prod):
        for container in containers(workload):
            assert "redis" not in split_image(container["image"])[0].rsplit("/", 1)[-1]
    assert not [o for o in prod if o["kind"] == "Service" and "redis" in o["metadata"]["name"]]


def test_prod_autoscales_the_http_deployment_on_cpu(prod: list[Obj]) -> None:
    (hpa,) = [o for o in prod if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP}
    assert spec["minReplicas"] >= 2
    assert spec["maxReplicas"] > spec["minReplicas"]
    (metric,) = spec["metrics"]
    assert metric["type"] == "Resource"
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 60 <= metric["resource"]["target"]["averageUtilization"] <= 80
    # utilisation is measured against the request
    assert "cpu" in app_container(prod)["resources"]["requests"]
    assert "replicas" not in one(prod, "Deployment", APP)["spec"]


def test_prod_requests_one_core_per_http_process_and_less_for_the_worker(prod: list[Obj]) -> None:
    http = app_container(prod)["resources"]
    worker = prod_container(prod, WORKER)["resources"]
    assert cpu_millis(http["requests"]["cpu"]) == 1000, "one serve process uses one core"
    assert cpu_millis(http["limits"]["cpu"]) >= 1000
    assert memory_mib(http["requests"]["memory"]) >= 256
    assert cpu_millis(worker["requests"]["cpu"]) < cpu_millis(http["requests"]["cpu"])
    assert memory_mib(worker["requests"]["memory"]) <= memory_mib(http["requests"]["memory"])
    for resources in (http, worker):
        assert memory_mib(resources["limits"]["memory"]) >= memory_mib(
            resources["requests"]["memory"]
        )
        assert cpu_millis(resources["limits"]["cpu"]) >= cpu_millis(resources["requests"]["cpu"])


def test_prod_keeps_a_replica_of_both_deployments_through_drains(prod: list[Obj]) -> None:
    covered = {
        w["metadata"]["name"]
        for pdb in prod
        if pdb["kind"] == "PodDisruptionBudget"
        for w in workloads(prod)
        if selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(w))
    }
    assert {APP, WORKER} <= covered


def test_prod_worker_pods_admit_no_connection(prod: list[Obj]) -> None:
    policies = network_policies(prod, labels_of(prod, WORKER), "Ingress")
    assert policies, "no NetworkPolicy isolates the worker pods"
    assert not rules(policies, "ingress"), "the worker listens on nothing: admit nothing"


def test_prod_http_pods_admit_only_selected_peers_on_the_http_port(prod: list[Obj]) -> None:
    policies = network_policies(prod, labels_of(prod, APP), "Ingress")
    assert APP in [p["metadata"]["name"] for p in policies], "the HTTP NetworkPolicy is missing"
    admitted = rules(policies, "ingress")
    assert admitted
    for rule in admitted:
        assert rule.get("from"), f"a rule without `from` admits everyone: {rule}"
        for peer in rule["from"]:
            assert "ipBlock" not in peer, f"admit pods by selector, not addresses: {peer}"
            assert match_labels(peer.get("podSelector", {})), f"admit pods, not namespaces: {peer}"
        assert rule.get("ports"), f"a rule without ports admits every port: {rule}"
        for port in rule["ports"]:
            assert port["port"] in ("http", 8080), f"only the HTTP port is served: {port}"


def test_prod_egress_reaches_only_listed_destinations(prod: list[Obj]) -> None:
    for name in (APP, WORKER):
        policies = network_policies(prod, labels_of(prod, name), "Egress")
        assert policies, f"{name} pods may connect anywhere"
        allowed = rules(policies, "egress")
        for rule in allowed:
            assert rule.get("to"), f"a rule without `to` allows every destination: {rule}"
            assert rule.get("ports"), f"a rule without ports allows every port: {rule}"
            for peer in rule["to"]:
                cidr = peer.get("ipBlock", {}).get("cidr")
                assert cidr not in ("0.0.0.0/0", "::/0"), f"{name} may reach the whole Internet"
        dns = {(p["port"], p.get("protocol", "TCP")) for r in allowed for p in r["ports"]}
        assert {(53, "UDP"), (53, "TCP")} <= dns, f"{name} cannot resolve names"


def test_prod_sends_telemetry_to_the_collector(prod: list[Obj]) -> None:
    data = one(prod, "ConfigMap", CONFIGMAP_NAME)["data"]
    endpoint = urlsplit(data["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.hostname == COLLECTOR
    service = one(prod, "Service", COLLECTOR)
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == endpoint.port]
    collector = one(prod, "Deployment", COLLECTOR)
    pod_port = port_number(collector, port["targetPort"])
    assert data.get("OTEL_TRACES_EXPORTER") == "otlp"
    assert data.get("OTEL_METRICS_EXPORTER") == "otlp"
    # the collector listens where its container ports are, and exports somewhere it defines
    config = yaml.safe_load(
        one(prod, "ConfigMap", "otel-collector-config")["data"]["collector.yaml"]
    )
    protocols = config["receivers"]["otlp"]["protocols"]
    listening = {int(protocols[p]["endpoint"].rsplit(":", 1)[1]) for p in ("grpc", "http")}
    assert listening == {4317, 4318}
    assert pod_port in listening
    assert listening <= {port_number(collector, p) for p in port_names(collector)}
    assert "debug" in config["exporters"], "the placeholder exporter is `debug` until replaced"
    for pipeline in config["service"]["pipelines"].values():
        assert set(pipeline["receivers"]) <= set(config["receivers"])
        assert set(pipeline["processors"]) <= set(config["processors"])
        assert set(pipeline["exporters"]) <= set(config["exporters"])
    # and the NetworkPolicies let the service's pods through, and only them
    collector_labels = pod_labels(collector)
    for name in (APP, WORKER):
        reachable = [
            rule
            for rule in rules(network_policies(prod, labels_of(prod, name), "Egress"), "egress")
            if any(
                selects(match_labels(t.get("podSelector", {})), collector_labels)
                for t in rule["to"]
            )
            and pod_port in [p["port"] for p in rule["ports"]]
        ]
        assert reachable, f"{name} pods may not reach the collector on {pod_port}"
        admitted = [
            rule
            for rule in rules(network_policies(prod, collector_labels, "Ingress"), "ingress")
            if any(
                selects(match_labels(f.get("podSelector", {})), labels_of(prod, name))
                for f in rule["from"]
            )
            and pod_port in [port_number(collector, p["port"]) for p in rule["ports"]]
        ]
        assert admitted, f"the collector does not admit {name} pods"


def test_prod_ingress_routes_only_the_public_paths_over_tls(prod: list[Obj]) -> None:
    (ingress,) = [o for o in prod if o["kind"] == "Ingress"]
    spec = ingress["spec"]
    assert "defaultBackend" not in spec, "a default backend would route every path to the pods"
    assert spec["tls"], "the Ingress serves no TLS"
    tls_hosts = {host for entry in spec["tls"] for host in entry["hosts"]}
    assert all(entry.get("secretName") for entry in spec["tls"])
    paths = []
    for rule in spec["rules"]:
        assert rule["host"] in tls_hosts, f"{rule['host']} is served without TLS"
        for path in rule["http"]["paths"]:
            assert not path["path"].startswith(PRIVATE_PREFIXES), f"{path['path']} is not public"
            assert path["path"] in PUBLIC_PATHS, f"{path['path']} is not a public path"
            assert path["pathType"] in ("Exact", "Prefix")
            backend = path["backend"]["service"]
            assert backend == {"name": APP, "port": {"name": "http"}}
            paths.append(path["path"])
    assert {"/a2a", "/.well-known/agent-card.json", "/.well-known/agent.json"} <= set(paths)
    base = urlsplit(one(prod, "ConfigMap", CONFIGMAP_NAME)["data"]["AIM_PUBLIC_BASE_URL"])
    assert base.scheme == "https"
    assert base.hostname in {rule["host"] for rule in spec["rules"]}, (
        "the Agent Card would name a host the Ingress does not serve"
    )


def test_prod_placeholders_are_listed_for_operators(prod: list[Obj]) -> None:
    readme = (K8S / "README.md").read_text()
    section = readme[readme.index("## Production") :]
    data = one(prod, "ConfigMap", CONFIGMAP_NAME)["data"]
    placeholders = {
        data["AIM_PUBLIC_BASE_URL"],
        data["AIM_LIVEKIT_URL"],
        data["AIM_LIVEKIT_PUBLIC_URL"],
        split_image(app_container(prod)["image"])[0],
        split_image(prod_container(prod, COLLECTOR)["image"])[0],
    }
    for ingress in (o for o in prod if o["kind"] == "Ingress"):
        placeholders.add(ingress["spec"]["ingressClassName"])
        placeholders |= {entry["secretName"] for entry in ingress["spec"]["tls"]}
        placeholders |= {rule["host"] for rule in ingress["spec"]["rules"]}
    for policy in (o for o in prod if o["kind"] == "NetworkPolicy"):
        peers = [
            *(p for r in policy["spec"].get("ingress", []) for p in r.get("from", [])),
            *(p for r in policy["spec"].get("egress", []) for p in r.get("to", [])),
        ]
        for peer in peers:
            if "ipBlock" in peer:
                placeholders.add(peer["ipBlock"]["cidr"])
            if "namespaceSelector" in peer:
                placeholders |= set(match_labels(peer["namespaceSelector"]).values())
                placeholders |= {
                    f"{k}={v}" for k, v in match_labels(peer.get("podSelector", {})).items()
                }
    missing = sorted(p for p in placeholders if p not in section)
    assert not missing, f"README.md, Production, does not tell operators about {missing}"


def test_prod_secrets_and_their_rotation_are_documented() -> None:
    readme = (K8S / "README.md").read_text()
    section = readme[readme.index("## Production") :]
    for command in (
        f"create secret generic {SECRET_NAME}",
        f"create secret generic {REDIS_SECRET}",
        "create secret tls aim-realtime-tls",
        'AIM_REDIS_URL="rediss://',
        "apply -k k8s/overlays/prod",
        RESTART,
    ):
        assert command in section, f"README.md, Production, lacks `{command}`"
    rotation = section[section.index("### Rotating secrets") :]
    for key in (*SECRET_KEYS, "AIM_REDIS_URL"):
        assert key in rotation, f"no rotation steps for {key}"
