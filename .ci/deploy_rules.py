"""Checks the rendered Kubernetes objects for the rules Strata's deployment relies on.

Usage: deploy_rules.py RENDERED.yaml...  (one file per overlay, from `kubectl kustomize`)
"""

import sys
from fractions import Fraction

import yaml

# Secrets an overlay may leave to the operator (created out of band, see deploy/overlays/production).
EXTERNAL_SECRETS = {"strata-database", "strata-gateway"}


def quantity(text):
    """A Kubernetes quantity as an exact number ("500m" -> 1/2, "2Gi" -> 2**31)."""
    text = str(text)
    suffixes = {"m": Fraction(1, 1000), "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * suffixes[suffix]
    return Fraction(text)


def containers(pod_spec, init=True):
    listed = list(pod_spec.get("containers", []))
    if init:
        listed += pod_spec.get("initContainers", [])
    return listed


def by_component(objects, kind, component):
    return [o for o in objects if o["kind"] == kind
            and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]


def check_overlay(path, objects, problems):
    def fail(message):
        problems.append(f"{path}: {message}")

    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Job")]
    for o in workloads:
        for c in containers(o["spec"]["template"]["spec"]):
            res = c.get("resources", {})
            if not res.get("requests") or not res.get("limits"):
                fail(f"{o['kind']} {o['metadata']['name']} container {c['name']} lacks requests or limits")

    engines = by_component(objects, "Deployment", "engine")
    if not engines:
        fail("no engine pool Deployment")
    for d in engines:
        name = d["metadata"]["name"]
        spec = d["spec"]["template"]["spec"]
        for c in containers(spec):
            req, lim = c["resources"]["requests"], c["resources"]["limits"]
            if quantity(req["cpu"]) != quantity(lim["cpu"]) or quantity(req["memory"]) != quantity(lim["memory"]):
                fail(f"engine {name} container {c['name']}: requests != limits (not Guaranteed QoS)")
            if quantity(req["cpu"]).denominator != 1:
                fail(f"engine {name} container {c['name']}: CPU {req['cpu']} is not whole (no pinned cores)")
        engine = spec["containers"][0]
        for probe in ("readinessProbe", "livenessProbe"):
            if engine.get(probe, {}).get("httpGet", {}).get("path") != "/health":
                fail(f"engine {name}: {probe} is not on /health")
        threads = [a for a in engine["args"] if a.startswith("--threads=")]
        if threads != [f"--threads={quantity(engine['resources']['limits']['cpu'])}"]:
            fail(f"engine {name}: --threads does not equal its whole CPUs")
        if not any(c["args"][:2] == ["model", "pull"] for c in spec.get("initContainers", [])):
            fail(f"engine {name}: no init container pulls the model")
        annotations = d["spec"]["template"]["metadata"].get("annotations", {})
        if annotations.get("prometheus.io/scrape") != "true":
            fail(f"engine {name}: no Prometheus scrape annotation")

    gateways = by_component(objects, "Deployment", "gateway")
    if len(gateways) != 1:
        fail("expected one gateway Deployment")
    for d in gateways:
        name = d["metadata"]["name"]
        if d["spec"].get("replicas", 1) < 2:
            fail(f"gateway {name}: fewer than 2 replicas")
        spec = d["spec"]["template"]["spec"]
        if spec.get("terminationGracePeriodSeconds", 30) < 30 or "preStop" not in spec["containers"][0].get("lifecycle", {}):
            fail(f"gateway {name}: no drain (preStop and a grace period of 30 s or more)")
        if not any(v.get("configMap") for v in spec.get("volumes", [])):
            fail(f"gateway {name}: config not from a ConfigMap")
        selected = d["spec"]["selector"]["matchLabels"]
        pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"
                and o["spec"]["selector"].get("matchLabels") == selected]
        if not pdbs:
            fail(f"gateway {name}: no PodDisruptionBudget")
        hpas = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"
                and o["spec"]["scaleTargetRef"]["name"] == name]
        if not hpas or hpas[0]["spec"]["minReplicas"] < 2:
            fail(f"gateway {name}: no HPA with at least 2 replicas")
        elif not any(m.get("resource", {}).get("name") == "cpu" for m in hpas[0]["spec"]["metrics"]):
            fail(f"gateway {name}: HPA does not scale on CPU")

    if not [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("migrate")]:
        fail("no migration Job")
    for component in ("gateway", "profiling", "dashboard"):
        for d in by_component(objects, "Deployment", component):
            inits = d["spec"]["template"]["spec"].get("initContainers", [])
            if not any("strata store check" in " ".join(c.get("command", [])) for c in inits):
                fail(f"{d['metadata']['name']}: does not wait for the migrations before it starts")
    if not by_component(objects, "Deployment", "profiling"):
        fail("no profiling worker Deployment")

    secrets = {o["metadata"]["name"] for o in objects if o["kind"] == "Secret"}
    for o in workloads:
        for c in containers(o["spec"]["template"]["spec"]):
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in secrets and ref["name"] not in EXTERNAL_SECRETS:
                    fail(f"{o['metadata']['name']}: Secret {ref['name']} is neither rendered nor a documented external one")


def main(paths):
    problems = []
    for path in paths:
        with open(path) as f:
            objects = [o for o in yaml.safe_load_all(f) if o]
        check_overlay(path, objects, problems)
        print(f"rules: {path.rsplit('/', 1)[-1]} ({len(objects)} objects) checked")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
