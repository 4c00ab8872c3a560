"""Upstream's own install manifests, applied to the control plane as a user applies them.

Kueue's are `kustomize build config/default` of its module (its release manifests), Crossplane's
and NFD's are their Helm charts rendered with `helm template`. Their controllers run as local
processes instead of Deployments, each with its own ServiceAccount's token and the RBAC its
manifests ship, so a grant they lack fails here as it would in a cluster. Two things differ
from a cluster, both because no Pod network exists on loopback:
- a webhook's `service` reference becomes a `url` on 127.0.0.1's port, under the same host
  name, which this process's private /etc/hosts maps to 127.0.0.1 (e2e/__main__.py), so the
  certificates Kueue makes for its Service still match;
- the function's endpoint is a loopback address (`function.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e import pki
from e2e.binaries import binary, module_dir, versions
from e2e.cluster import ControlPlane, free_port
from e2e.kube import Kubectl, documents

# name → namespace of every Service whose webhooks the API server calls on loopback
WEBHOOK_SECRET = "kueue-webhook-server-cert"  # Kueue's default internalCertManagement Secret
WEBHOOK_HOSTS = {"kueue-webhook-service": "kueue-system"}


def hosts_entries() -> list[str]:
    return [f"127.0.0.1 {name}.{namespace}.svc" for name, namespace in WEBHOOK_HOSTS.items()]


def loopback_webhook(client_config: Mapping[str, Any], port: int) -> dict[str, Any]:
    """A webhook's `service` reference as a `url` on loopback under the Service's DNS name."""
    service = client_config["service"]
    config = {k: v for k, v in client_config.items() if k != "service"}
    config["url"] = (
        f"https://{service['name']}.{service['namespace']}.svc:{port}{service.get('path', '')}"
    )
    return config


def without(objects: Iterable[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] not in kinds]


# -- Kueue -------------------------------------------------------------------------------------
def kueue_manifests(port: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Kueue's release manifests with webhooks on loopback, and its shipped configuration."""
    source = module_dir("sigs.k8s.io/kueue", versions()["KUEUE"]) / "config" / "default"
    objects = documents(Kubectl.kustomize(source))
    config: dict[str, Any] = {}
    kept = []
    for obj in objects:
        kind = obj["kind"]
        if kind in ("Deployment", "APIService"):  # the manager runs as a process; no visibility API
            continue
        if kind == "ConfigMap" and "controller_manager_config.yaml" in obj.get("data", {}):
            config = yaml.safe_load(obj["data"]["controller_manager_config.yaml"])
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj["webhooks"]:
                hook["clientConfig"] = loopback_webhook(hook["clientConfig"], port)
        if kind == "CustomResourceDefinition":
            webhook = (obj["spec"].get("conversion") or {}).get("webhook")
            if webhook:
                webhook["clientConfig"] = loopback_webhook(webhook["clientConfig"], port)
        kept.append(obj)
    return kept, config


def kueue_configuration(
    shipped: Mapping[str, Any], fragment: Mapping[str, Any], root: Path, ports: Mapping[str, int]
) -> dict[str, Any]:
    """Kueue's shipped configuration, with this package's fragment merged as docs/kueue.md says
    (its frameworks added, its resources section taken), served on loopback."""
    config = copy.deepcopy(dict(shipped))
    frameworks = config.setdefault("integrations", {}).setdefault("frameworks", [])
    for framework in (fragment.get("integrations") or {}).get("frameworks", []):
        if framework not in frameworks:
            frameworks.append(framework)
    if "resources" in fragment:
        config["resources"] = copy.deepcopy(fragment["resources"])
    config["leaderElection"] = {"leaderElect": False}
    config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"}
    config["metrics"] = {"bindAddress": f"127.0.0.1:{ports['metrics']}"}
    config["webhook"] = {
        "host": "127.0.0.1",
        "port": ports["webhook"],
        "certDir": str(root / "kueue-certs"),
    }
    # The on-demand visibility API is an aggregated API server: no Service can reach it here.
    config.setdefault("featureGates", {})["VisibilityOnDemand"] = False
    return config


def install_kueue(plane: ControlPlane, kubectl: Kubectl, fragment_file: Path) -> None:
    ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
    objects, shipped = kueue_manifests(ports["webhook"])
    kubectl.apply(objects)
    fragment = yaml.safe_load(fragment_file.read_text())
    config = kueue_configuration(shipped, fragment, plane.root, ports)
    config_file = plane.root / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    kubeconfig = kubectl.token_kubeconfig(
        plane.root / "kueue.kubeconfig",
        plane.server,
        plane.ca.cert,
        "kueue-controller-manager",
        "kueue-system",
    )
    process = plane.run(
        "kueue",
        [
            str(binary("kueue")),
            f"--config={config_file}",
            f"--kubeconfig={kubeconfig}",
        ],
        env={"POD_NAMESPACE": "kueue-system", "NAMESPACE": "kueue-system"},
    )
    # Kueue's internal certificate management fills its Secret, then waits for the kubelet to
    # mount it (cert-controller's ensureCertsMounted): mounted here instead.
    secret = config.get("internalCertManagement", {}).get("webhookSecretName") or WEBHOOK_SECRET
    kubectl.mount_secret(
        secret, "kueue-system", plane.root / "kueue-certs", ("ca.crt", "tls.crt", "tls.key")
    )
    plane.wait_healthy_http("kueue", ports["health"], "/readyz")
    del process


# -- provider-kubernetes (Crossplane 1.x) --------------------------------------------------------
PROVIDER_ACCOUNT = ("provider-kubernetes", "crossplane-system")
PROVIDER_CREDENTIALS = "provider-kubernetes-credentials"


def provider_kubernetes_grants() -> list[dict[str, Any]]:
    """What installing provider-kubernetes as a package would grant: Crossplane manages its
    Objects (the RBAC manager's `aggregate-to-crossplane` role for a provider's CRDs), and its
    ServiceAccount, which applies what the Objects carry, is bound to cluster-admin, as the
    provider's own documentation tells a user to do."""
    name, namespace = PROVIDER_ACCOUNT
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"crossplane:provider:{name}:aggregate-to-crossplane",
                      "labels": {"rbac.crossplane.io/aggregate-to-crossplane": "true"}},
         "rules": [{"apiGroups": ["kubernetes.crossplane.io"], "resources": ["*"],
                    "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{name}-cluster-admin"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]  # fmt: skip


def install_provider_kubernetes(plane: ControlPlane, kubectl: Kubectl) -> None:
    """provider-kubernetes, through which the legacy set composes on Crossplane 1.x
    (functions/envelope.py): its CRDs, its process acting as its ServiceAccount, and the
    ProviderConfig `default` whose credentials are that account's kubeconfig. Watches on, so an
    Object observes what it carries again as soon as it changes."""
    source = module_dir(
        "github.com/crossplane-contrib/provider-kubernetes", versions()["PROVIDER_KUBERNETES"]
    )
    crds = [
        documents(path.read_text())[0] for path in sorted((source / "package" / "crds").iterdir())
    ]
    for crd in crds:
        # Crossplane's package manager points a provider's conversion webhook at the provider's
        # Service; none can be reached here, and only v1alpha2 Objects are written
        crd["spec"]["conversion"] = {"strategy": "None"}
    kubectl.apply(crds)
    kubectl.wait("condition=Established", ["crd", *(c["metadata"]["name"] for c in crds)])
    kubectl.apply(provider_kubernetes_grants())
    name, namespace = PROVIDER_ACCOUNT
    kubeconfig = kubectl.token_kubeconfig(
        plane.root / "provider-kubernetes.kubeconfig", plane.server, plane.ca.cert, name, namespace
    )
    kubectl(
        "create", "secret", "generic", PROVIDER_CREDENTIALS, "-n", namespace,
        f"--from-file=kubeconfig={kubeconfig}",
    )  # fmt: skip
    kubectl.apply(
        [
            {
                "apiVersion": "kubernetes.crossplane.io/v1alpha1",
                "kind": "ProviderConfig",
                "metadata": {"name": "default"},
                "spec": {
                    "credentials": {
                        "source": "Secret",
                        "secretRef": {
                            "namespace": namespace,
                            "name": PROVIDER_CREDENTIALS,
                            "key": "kubeconfig",
                        },
                    }
                },
            }
        ]
    )
    # its webhook server (the conversion webhook nothing calls) needs a certificate to start
    certs = plane.root / "provider-kubernetes-tls"
    certs.mkdir(exist_ok=True)
    pki.signed(certs, "tls", plane.ca, name, hosts=("localhost",))
    plane.run(
        "provider-kubernetes",
        # server-side apply: a client-side apply writes the whole manifest into an annotation,
        # which a node's summary ConfigMap outgrows (256 KiB)
        [
            str(binary("provider")),
            "--enable-watches",
            "--enable-server-side-apply",
            "--poll=1m",
            "--debug",
        ],
        env={"KUBECONFIG": str(kubeconfig), "TLS_SERVER_CERTS_DIR": str(certs)},
    )
