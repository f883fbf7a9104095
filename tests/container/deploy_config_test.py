#!/usr/bin/python3
"""The deployment files checked with the tools Debian has (no Docker, Kubernetes or Envoy here).

Run by deploy/container/container_test.sh with Debian's /usr/bin/python3 (python3-yaml):

  deploy_config_test.py --deploy_dir=deploy [--kubectl=kubectl] [--docker_compose=docker-compose]

Checks:
  - Dockerfile: two stages from ${BASE_IMAGE}, the build stage's packages are all in
    scripts/install_deps.sh (the project's one list), the runtime stage installs no -dev
    package, and USER / EXPOSE / VOLUME / HEALTHCHECK / ENTRYPOINT say what the rest relies on.
  - deploy/docker-compose.yml: `docker-compose config` (Debian's docker-compose 1.29, which
    validates the file against the Compose schema without a daemon) accepts it; services okl
    (built from ../Dockerfile, ports 50051 and 9464, a volume at /data, a stop grace longer than
    okl_server's drain), prometheus (deploy/prometheus/prometheus.yml mounted where the image
    reads it) and grafana (provisioning and dashboards mounted as deploy/README.md says); every
    bind-mounted host path exists. (promtool and the dashboard are tests/system's.)
  - deploy/k8s: `kubectl kustomize` renders it; the StatefulSet has a PVC template mounted at
    /data, gRPC (grpc.health.v1) readiness/liveness/startup probes on 50051, requests and
    limits, a non-root securityContext with the image's uid, a grace period longer than its
    --shutdown_grace; the headless Service and the ServiceMonitor name the same ports; the
    router's ConfigMap holds deploy/envoy/envoy.yaml verbatim.
  - deploy/envoy/envoy.yaml: parses; okl.v1 calls are ring-hashed on x-okl-tenant to an HTTP/2
    STRICT_DNS cluster of one endpoint per StatefulSet pod (okl-N.okl:50051, as many as its
    replicas), health-checked with grpc_health_check. Envoy itself is not in Debian, so
    `envoy --mode validate` does not run here.
Exits non-zero on any failure.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import unittest

import yaml  # python3-yaml

ARGS = None


def run(cmd, cwd=None):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(cmd), result.returncode,
                                                     result.stdout, result.stderr))
    return result.stdout


def repo_path(*parts):
    return os.path.join(os.path.dirname(os.path.abspath(ARGS.deploy_dir)), *parts)


def deploy_path(*parts):
    return os.path.join(ARGS.deploy_dir, *parts)


def dockerfile_instructions():
    """[(INSTRUCTION, argument text)] of the Dockerfile, continuation lines joined."""
    with open(repo_path("Dockerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_uid():
    users = [arg for word, arg in dockerfile_instructions() if word == "USER"]
    return int(users[-1].split(":")[0])


def duration_seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m)", str(text))
    assert match, "not a duration: %r" % text
    value, unit = int(match.group(1)), match.group(2)
    return value / 1000 if unit == "ms" else value * (60 if unit == "m" else 1)


class DockerfileTest(unittest.TestCase):

    def test_build_packages_come_from_install_deps_and_runtime_has_no_dev_packages(self):
        with open(repo_path("scripts", "install_deps.sh")) as f:
            project = set(re.findall(r"[a-z0-9][a-z0-9+.-]+", re.sub(r"#.*", "", f.read())))
        stages = []
        for word, arg in dockerfile_instructions():
            if word == "FROM":
                stages.append([])
                self.assertTrue(arg.startswith("${BASE_IMAGE}"),
                                "every stage starts from ${BASE_IMAGE}: FROM %s" % arg)
            elif word == "RUN" and "apt-get install" in arg and stages:
                packages = [w for w in shlex.split(arg.split("apt-get install", 1)[1])
                            if not w.startswith("-") and w != "&&"]
                stages[-1].extend(packages[:packages.index("rm")] if "rm" in packages
                                  else packages)
        self.assertEqual(len(stages), 2, "a build stage and a runtime stage")
        build, runtime = stages
        self.assertIn("g++", build)
        self.assertEqual(sorted(set(build) - project), [],
                         "build-stage packages missing from scripts/install_deps.sh")
        self.assertEqual([p for p in runtime if p.endswith("-dev") or p in ("g++", "cmake")],
                         [], "the runtime stage installs development packages")

    def test_runtime_contract(self):
        instructions = dockerfile_instructions()
        last_from = max(i for i, (w, _) in enumerate(instructions) if w == "FROM")
        runtime = dict(instructions[last_from:])
        self.assertNotEqual(image_uid(), 0)
        self.assertEqual(runtime["EXPOSE"].split(), ["50051", "9464"])
        self.assertIn('"/data"', runtime["VOLUME"])
        self.assertIn('["okl", "health", "--server=127.0.0.1:50051"', runtime["HEALTHCHECK"])
        self.assertTrue(runtime["ENTRYPOINT"].startswith('["okl_server"'),
                        "exec form, okl_server as PID 1: %s" % runtime["ENTRYPOINT"])
        for flag in ("--listen=0.0.0.0:50051", "--metrics_address=0.0.0.0:9464",
                     "--data_dir=/data"):
            self.assertIn(flag, runtime["ENTRYPOINT"])


class ComposeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        path = deploy_path("docker-compose.yml")
        # Validates against the Compose schema; resolves relative paths against deploy/.
        cls.config = yaml.safe_load(run([ARGS.docker_compose, "-f", path, "config"]))
        cls.services = cls.config["services"]

    def mounts(self, service):
        out = {}
        for volume in self.services[service].get("volumes", []):
            source, target = volume.split(":")[:2]
            out[target] = source
        return out

    def test_services(self):
        self.assertEqual(sorted(self.services), ["grafana", "okl", "prometheus"])

    def test_okl_is_built_from_the_dockerfile_with_its_ports_and_a_data_volume(self):
        okl = self.services["okl"]
        self.assertEqual(os.path.realpath(okl["build"]["context"]),
                         os.path.realpath(repo_path()))
        self.assertEqual(okl["build"].get("dockerfile", "Dockerfile"), "Dockerfile")
        published = {p.split(":")[-1].split("/")[0] for p in okl["ports"]}
        self.assertEqual(published, {"50051", "9464"})
        self.assertIn("/data", self.mounts("okl"))
        self.assertIn(self.mounts("okl")["/data"], self.config.get("volumes", {}),
                      "/data is a named volume (it takes the image's owner of /data)")
        self.assertGreater(duration_seconds(okl["stop_grace_period"]), 10,
                           "more than okl_server's default --shutdown_grace (10s)")

    def test_prometheus_and_grafana_mount_deploy_files(self):
        prometheus = self.mounts("prometheus")
        self.assertEqual(os.path.realpath(prometheus["/etc/prometheus/prometheus.yml"]),
                         os.path.realpath(deploy_path("prometheus", "prometheus.yml")))
        grafana = self.mounts("grafana")
        self.assertEqual(os.path.realpath(grafana["/etc/grafana/provisioning"]),
                         os.path.realpath(deploy_path("grafana", "provisioning")))
        self.assertEqual(os.path.realpath(grafana["/var/lib/grafana/dashboards"]),
                         os.path.realpath(deploy_path("grafana", "dashboards")))
        for service in self.services:
            for target, source in self.mounts(service).items():
                if source.startswith("/"):
                    self.assertTrue(os.path.exists(source), "%s: %s -> %s: no such host path"
                                    % (service, source, target))
        # prometheus.yml scrapes the compose service `okl` on its metrics port.
        with open(deploy_path("prometheus", "prometheus.yml")) as f:
            scrape = yaml.safe_load(f)["scrape_configs"]
        targets = [t for job in scrape if job["job_name"] == "okl"
                   for sc in job["static_configs"] for t in sc["targets"]]
        self.assertEqual(targets, ["okl:9464"])


class KustomizeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        rendered = run([ARGS.kubectl, "kustomize", deploy_path("k8s")])
        cls.objects = [o for o in yaml.safe_load_all(rendered) if o]
        cls.by_kind = {}
        for o in cls.objects:
            cls.by_kind.setdefault(o["kind"], []).append(o)

    def one(self, kind, name):
        found = [o for o in self.by_kind.get(kind, []) if o["metadata"]["name"] == name]
        self.assertEqual(len(found), 1, "%s/%s rendered %d times" % (kind, name, len(found)))
        return found[0]

    def test_renders_the_expected_objects_in_one_namespace(self):
        self.assertEqual(sorted((o["kind"], o["metadata"]["name"]) for o in self.objects
                                if o["kind"] != "ConfigMap"),
                         [("Deployment", "okl-router"), ("Namespace", "okl"),
                          ("PodDisruptionBudget", "okl"), ("Service", "okl"),
                          ("Service", "okl-router"), ("ServiceMonitor", "okl"),
                          ("StatefulSet", "okl")])
        for o in self.objects:
            if o["kind"] != "Namespace":
                self.assertEqual(o["metadata"].get("namespace"), "okl", o["metadata"]["name"])

    def test_statefulset(self):
        sts = self.one("StatefulSet", "okl")
        spec = sts["spec"]
        self.assertEqual(spec["serviceName"], "okl")
        pod = spec["template"]["spec"]
        self.assertEqual(spec["selector"]["matchLabels"],
                         {k: v for k, v in spec["template"]["metadata"]["labels"].items()
                          if k in spec["selector"]["matchLabels"]})
        (container,) = pod["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(ports, {"grpc": 50051, "metrics": 9464})
        # One PersistentVolumeClaim per pod, mounted at /data (okl_server --data_dir=/data).
        (claim,) = spec["volumeClaimTemplates"]
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertIn("storage", claim["spec"]["resources"]["requests"])
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        self.assertEqual(mounts["/data"], claim["metadata"]["name"])
        # Kubernetes' native gRPC probes: grpc.health.v1 Check on the gRPC port.
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            self.assertEqual(container[probe].get("grpc"), {"port": 50051}, probe)
        for kind in ("requests", "limits"):
            self.assertEqual(sorted(container["resources"][kind]), ["cpu", "memory"], kind)
        security = pod["securityContext"]
        self.assertTrue(security["runAsNonRoot"])
        self.assertEqual(security["runAsUser"], image_uid())
        self.assertEqual(security["fsGroup"], image_uid())
        self.assertFalse(container["securityContext"]["allowPrivilegeEscalation"])
        grace = [a.split("=", 1)[1] for a in container.get("args", [])
                 if a.startswith("--shutdown_grace=")]
        self.assertGreater(pod["terminationGracePeriodSeconds"],
                           duration_seconds(grace[0]) if grace else 10)
        self.assertTrue(container["image"].endswith(":latest") or "@" in container["image"]
                        or ":" in container["image"].split("/")[-1])

    def test_headless_service_and_service_monitor(self):
        sts = self.one("StatefulSet", "okl")
        service = self.one("Service", "okl")
        self.assertEqual(service["spec"]["clusterIP"], "None")
        self.assertTrue(service["spec"].get("publishNotReadyAddresses"))
        labels = sts["spec"]["template"]["metadata"]["labels"]
        for k, v in service["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v, "the Service selects the StatefulSet's pods")
        ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        self.assertEqual(ports, {"grpc": 50051, "metrics": 9464})
        monitor = self.one("ServiceMonitor", "okl")
        self.assertEqual(self.by_kind["ServiceMonitor"][0]["apiVersion"], "monitoring.coreos.com/v1")
        for k, v in monitor["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(service["metadata"]["labels"].get(k), v,
                             "the ServiceMonitor selects the headless Service")
        (endpoint,) = monitor["spec"]["endpoints"]
        self.assertEqual(endpoint["port"], "metrics")
        self.assertEqual(endpoint.get("path", "/metrics"), "/metrics")

    def test_router_config_map_is_envoy_yaml(self):
        deployment = self.one("Deployment", "okl-router")
        (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"]
                     if "configMap" in v]
        config_map = self.one("ConfigMap", volume["configMap"]["name"])
        with open(deploy_path("envoy", "envoy.yaml")) as f:
            self.assertEqual(config_map["data"]["envoy.yaml"], f.read())


class EnvoyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(deploy_path("envoy", "envoy.yaml")) as f:
            cls.config = yaml.safe_load(f)
        with open(deploy_path("k8s", "statefulset.yaml")) as f:
            cls.replicas = yaml.safe_load(f)["spec"]["replicas"]

    def cluster(self, name):
        (cluster,) = [c for c in self.config["static_resources"]["clusters"]
                      if c["name"] == name]
        return cluster

    def routes(self):
        (listener,) = self.config["static_resources"]["listeners"]
        (chain,) = listener["filter_chains"]
        (hcm,) = [f for f in chain["filters"]
                  if f["name"] == "envoy.filters.network.http_connection_manager"]
        config = hcm["typed_config"]
        self.assertEqual(config["@type"], "type.googleapis.com/envoy.extensions.filters.network."
                         "http_connection_manager.v3.HttpConnectionManager")
        self.assertEqual(config["http_filters"][-1]["name"], "envoy.filters.http.router")
        (vhost,) = config["route_config"]["virtual_hosts"]
        return vhost["routes"]

    def test_okl_calls_are_ring_hashed_on_the_tenant_header(self):
        routes = self.routes()
        first = routes[0]
        self.assertEqual(first["match"]["prefix"], "/okl.v1.OnlineKernelLearning/")
        self.assertEqual(first["match"]["headers"],
                         [{"name": "x-okl-tenant", "present_match": True}])
        self.assertEqual(first["route"]["hash_policy"],
                         [{"header": {"header_name": "x-okl-tenant"}, "terminal": True}])
        cluster = self.cluster(first["route"]["cluster"])
        self.assertEqual(cluster["lb_policy"], "RING_HASH")
        self.assertTrue(cluster["common_lb_config"]["consistent_hashing_lb_config"]
                        ["use_hostname_for_hashing"])
        # Tenant-less okl.v1 calls are refused, not sent to an arbitrary shard.
        self.assertEqual(routes[1]["match"], {"prefix": "/okl.v1.OnlineKernelLearning/"})
        self.assertIn("direct_response", routes[1])
        # No route timeout cuts long streams.
        self.assertEqual(first["route"]["timeout"], "0s")

    def test_cluster_is_the_statefulset_pods_over_http2_with_grpc_health_checks(self):
        cluster = self.cluster("okl")
        self.assertEqual(cluster["type"], "STRICT_DNS")
        options = cluster["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        self.assertIn("http2_protocol_options", options["explicit_http_config"])
        (health,) = cluster["health_checks"]
        self.assertIn("grpc_health_check", health)
        endpoints = [e["endpoint"]["address"]["socket_address"]
                     for group in cluster["load_assignment"]["endpoints"]
                     for e in group["lb_endpoints"]]
        self.assertEqual([(e["address"], e["port_value"]) for e in endpoints],
                         [("okl-%d.okl" % i, 50051) for i in range(self.replicas)],
                         "one endpoint per StatefulSet pod (replicas: %d)" % self.replicas)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deploy_dir", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--docker_compose", default="docker-compose")
    ARGS, rest = parser.parse_known_args()
    ARGS.deploy_dir = os.path.abspath(ARGS.deploy_dir)
    sys.dont_write_bytecode = True
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
