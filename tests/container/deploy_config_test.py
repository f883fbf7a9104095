#!/usr/bin/python3
"""The deployment files checked with the tools Debian has (no Docker, Kubernetes or Envoy here).

Run by deploy/container/container_test.sh with Debian's /usr/bin/python3 (python3-yaml):

  deploy_config_test.py --deploy_dir=deploy [--kubectl=kubectl] [--docker_compose=docker-compose]

Checks:
  - Dockerfile: two stages from ${BASE_IMAGE}, the build stage's packages are all in
    scripts/install_deps.sh (the project's one list), the runtime stage installs no -dev
    package, and USER / EXPOSE / VOLUME / HEALTHCHECK / ENTRYPOINT say what the rest relies on
    (0.0.0.0 with --auth_tokens_file=/etc/okl/tokens, never --allow_unauthenticated).
  - deploy/docker-compose.yml: `docker-compose config` (Debian's docker-compose 1.29, which
    validates the file against the Compose schema without a daemon) accepts it; services okl
    (built from ../Dockerfile, ports 50051 and 9464, a volume at /data, the directory
    deploy/make_secrets.sh makes mounted read-only where the image reads its tokens, a stop
    grace longer than okl_server's drain), prometheus (deploy/prometheus/prometheus.yml
    and alerts.yml mounted where the image reads them, scraping okl:9464) and grafana (provisioning and dashboards
    mounted as deploy/README.md says); every other bind-mounted host path exists. (promtool
    and the dashboard are tests/system's.)
  - deploy/cluster/docker-compose.yml: `docker-compose config` accepts it; three replicas
    of the image, each with its own /data volume and the tokens, behind a router on 50051
    whose script fills in deploy/cluster/nginx.conf.in (run here: nginx -t accepts the result
    with the replicas' names on loopback).
  - deploy/k8s: `kubectl kustomize` renders it; the StatefulSet has a PVC template mounted at
    /data, the Secret okl-tokens (not rendered: never committed) mounted read-only as a
    directory so that its key `tokens` is the image's --auth_tokens_file, hashed metric labels,
    a --max_memory_bytes within the memory limit, gRPC (grpc.health.v1) readiness/liveness/
    startup probes on 50051, requests and limits, a non-root securityContext with the image's
    uid, a grace period longer than its --shutdown_grace; the headless Service and the
    ServiceMonitor name the same ports; the router's ConfigMap holds deploy/envoy/envoy.yaml
    verbatim.
  - deploy/k8s/tls (a kustomize Component, rendered on top of deploy/k8s when kubectl is 1.21
    or newer): okl_server's --tls_* files and the exec probes' --tls_ca are files the Secret
    okl-tls projects, the router mounts it where its envoy.yaml reads the certificate, and the
    router's ConfigMap is deploy/k8s/tls/envoy.yaml.
  - deploy/envoy/envoy.yaml: parses; okl.v1 calls are ring-hashed on x-okl-tenant to an HTTP/2
    STRICT_DNS cluster of one endpoint per StatefulSet pod (okl-N.okl:50051, as many as its
    replicas), health-checked with grpc_health_check; deploy/k8s/tls/envoy.yaml is the same
    plus TLS (ALPN h2) on the listener and to the cluster, verified against the CA. Envoy
    itself is not in Debian, so `envoy --mode validate` does not run here.
Exits non-zero on any failure.
"""

import argparse
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml  # python3-yaml

ARGS = None
TOKENS_PATH = "/etc/okl/tokens"  # the image's --auth_tokens_file


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


def entrypoint():
    """The runtime stage's ENTRYPOINT, exec form, as a list."""
    (text,) = [arg for word, arg in dockerfile_instructions() if word == "ENTRYPOINT"]
    return json.loads(text)


def quantity_bytes(text):
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(text))
    assert match, "not a byte quantity: %r" % text
    return int(match.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20,
                                  "Gi": 1 << 30}[match.group(2)]


def flag_values(args, name):
    return [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]


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
        self.assertEqual(entrypoint()[0], "okl_server")
        for flag in ("--listen=0.0.0.0:50051", "--metrics_address=0.0.0.0:9464",
                     "--data_dir=/data", "--auth_tokens_file=" + TOKENS_PATH):
            self.assertIn(flag, entrypoint())
        # Secure by default: serving 0.0.0.0 needs tokens; turning them off is the user's call.
        self.assertFalse([a for a in entrypoint() if "allow_unauthenticated" in a])
        self.assertNotIn("CMD", runtime, "flags belong in the ENTRYPOINT; a CMD would be "
                         "replaced by the first argument given")


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

    def mount_mode(self, service, target):
        for volume in self.services[service].get("volumes", []):
            parts = volume.split(":")
            if parts[1] == target:
                return parts[2] if len(parts) > 2 else "rw"
        return None

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

    def test_okl_reads_its_tokens_from_the_directory_make_secrets_makes(self):
        okl = self.services["okl"]
        directory = os.path.dirname(TOKENS_PATH)
        # make_secrets.sh's default --dir is deploy/secrets; what goes to /etc/okl is its okl/.
        self.assertEqual(os.path.realpath(self.mounts("okl")[directory]),
                         os.path.realpath(deploy_path("secrets", "okl")))
        self.assertEqual(self.mount_mode("okl", directory), "ro")
        with open(deploy_path("make_secrets.sh")) as f:
            script = f.read()
        self.assertIn("dir=$here/secrets", script)
        self.assertIn('"$dir/okl/tokens"', script)
        command = okl.get("command") or []
        self.assertFalse([a for a in command if "allow_unauthenticated" in a
                          or a.startswith("--auth_tokens_file")],
                         "compose keeps the image's --auth_tokens_file: %r" % command)
        # The image's HEALTHCHECK (plaintext) applies unless TLS is on, with its own check.
        if flag_values(command, "tls_cert_file"):
            self.assertIn("--tls_ca=/etc/okl/tls/ca.crt", okl["healthcheck"]["test"])

    def test_prometheus_and_grafana_mount_deploy_files(self):
        prometheus = self.mounts("prometheus")
        self.assertEqual(os.path.realpath(prometheus["/etc/prometheus/prometheus.yml"]),
                         os.path.realpath(deploy_path("prometheus", "prometheus.yml")))
        # Its rule file, beside it: prometheus.yml names it relative to itself.
        self.assertEqual(os.path.realpath(prometheus["/etc/prometheus/alerts.yml"]),
                         os.path.realpath(deploy_path("prometheus", "alerts.yml")))
        grafana = self.mounts("grafana")
        self.assertEqual(os.path.realpath(grafana["/etc/grafana/provisioning"]),
                         os.path.realpath(deploy_path("grafana", "provisioning")))
        self.assertEqual(os.path.realpath(grafana["/var/lib/grafana/dashboards"]),
                         os.path.realpath(deploy_path("grafana", "dashboards")))
        secrets = os.path.realpath(deploy_path("secrets"))
        for service in self.services:
            for target, source in self.mounts(service).items():
                if source.startswith("/") and not os.path.realpath(source).startswith(secrets):
                    self.assertTrue(os.path.exists(source), "%s: %s -> %s: no such host path"
                                    % (service, source, target))
        # prometheus.yml scrapes the compose service `okl` on its metrics port.
        with open(deploy_path("prometheus", "prometheus.yml")) as f:
            scrape = yaml.safe_load(f)["scrape_configs"]
        targets = [t for job in scrape if job["job_name"] == "okl"
                   for sc in job["static_configs"] for t in sc["targets"]]
        self.assertEqual(targets, ["okl:9464"])


class ClusterComposeTest(unittest.TestCase):
    """deploy/cluster/docker-compose.yml: the local cluster's topology in containers."""

    @classmethod
    def setUpClass(cls):
        path = deploy_path("cluster", "docker-compose.yml")
        cls.config = yaml.safe_load(run([ARGS.docker_compose, "-f", path, "config"]))
        cls.services = cls.config["services"]

    def test_three_replicas_with_their_own_stores_and_tokens_behind_the_router(self):
        self.assertEqual(sorted(self.services), ["okl-1", "okl-2", "okl-3", "router"])
        stores = set()
        for name in ["okl-1", "okl-2", "okl-3"]:
            replica = self.services[name]
            self.assertEqual(replica["image"], "okl:latest")
            self.assertNotIn("ports", replica, "replicas are reached through the router")
            mounts = {v.split(":")[1]: v.split(":")[0] for v in replica["volumes"]}
            self.assertEqual(os.path.realpath(mounts[os.path.dirname(TOKENS_PATH)]),
                             os.path.realpath(deploy_path("secrets", "okl")))
            self.assertIn(mounts["/data"], self.config["volumes"])
            stores.add(mounts["/data"])
            self.assertGreater(duration_seconds(replica["stop_grace_period"]), 10)
        self.assertEqual(len(stores), 3, "each replica has its own store")
        router = self.services["router"]
        self.assertEqual(sorted(router["depends_on"]), ["okl-1", "okl-2", "okl-3"])
        self.assertEqual([p.split(":")[-1].split("/")[0] for p in router["ports"]], ["50051"])

    def test_router_fills_in_the_local_clusters_nginx_config_with_the_replicas(self):
        router = self.services["router"]
        (template_mount,) = [v for v in router["volumes"] if "nginx.conf.in" in v]
        source, target = template_mount.split(":")[:2]
        self.assertEqual(os.path.realpath(source),
                         os.path.realpath(deploy_path("cluster", "nginx.conf.in")))
        self.assertEqual(router["command"][:2], ["sh", "-c"])
        script = router["command"][2]
        # Run the router's own script here, on the template, with nginx -t in place of the
        # server (the replicas' names resolve only on the compose network: loopback here).
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        with tempfile.TemporaryDirectory(prefix="okl_cluster_compose.") as tmp:
            local = (script.replace(target, deploy_path("cluster", "nginx.conf.in"))
                     .replace("/tmp/okl", tmp)
                     .replace("exec nginx -g 'daemon off;'", "true"))
            run(["sh", "-c", local])
            with open(os.path.join(tmp, "nginx.conf")) as f:
                rendered = f.read()
            self.assertEqual(re.findall(r"@[A-Z_]+@", rendered), [],
                             "placeholders left unfilled")
            servers = re.findall(r"server (okl-\d):50051 max_fails=0;", rendered)
            self.assertEqual(servers, ["okl-1", "okl-2", "okl-3"])
            self.assertIn("listen 0.0.0.0:50051 http2;", rendered)
            with open(os.path.join(tmp, "nginx-loopback.conf"), "w") as f:
                f.write(re.sub(r"okl-\d:50051", "127.0.0.1:50051", rendered))
            if os.path.exists(nginx):
                run(["env", "-u", "NGINX", nginx, "-t", "-q", "-c",
                     os.path.join(tmp, "nginx-loopback.conf")])


def render(directory):
    """`kubectl kustomize DIRECTORY` as {kind: [objects]} and the list of objects."""
    rendered = run([ARGS.kubectl, "kustomize", directory])
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    return objects, by_kind


def projected_files(pod_spec, volume_name):
    """{path in the volume: (secret, key)} of a projected (or secret) volume."""
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == volume_name]
    sources = (volume["projected"]["sources"] if "projected" in volume
               else [{"secret": {"name": volume["secret"]["secretName"],
                                 "items": volume["secret"].get("items")}}])
    out = {}
    for source in sources:
        secret = source["secret"]
        for item in secret.get("items") or []:
            out[item["path"]] = (secret["name"], item["key"])
    return out


def mounted_files(pod_spec, container):
    """{absolute path: (secret, key)} of every Secret item the container mounts."""
    out = {}
    for mount in container.get("volumeMounts", []):
        volume = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
        if not volume or not ({"projected", "secret"} & set(volume[0])):
            continue
        assert "subPath" not in mount, "subPath mounts never see a Secret's updates"
        for path, item in projected_files(pod_spec, mount["name"]).items():
            out[os.path.join(mount["mountPath"], path)] = item
    return out


class KustomizeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.objects, cls.by_kind = render(deploy_path("k8s"))

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
        # The models' memory budget is set (the default, 3/4 of the node's memory, does not
        # see the pod's limit) and fits in the limit.
        (budget,) = flag_values(container["args"], "max_memory_bytes")
        self.assertLess(int(budget), quantity_bytes(container["resources"]["limits"]["memory"]))
        # Whoever can scrape :9464 does not learn the tenants' names.
        self.assertEqual(flag_values(container["args"], "metrics_model_labels"), ["hashed"])
        for flag in ("auth_tokens_file", "allow_unauthenticated", "listen"):
            self.assertEqual(flag_values(container["args"], flag), [],
                             "--%s is the image's ENTRYPOINT's" % flag)

    def test_tokens_come_from_a_secret_that_is_not_committed(self):
        sts = self.one("StatefulSet", "okl")
        pod = sts["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        self.assertEqual(mounted_files(pod, container).get(TOKENS_PATH), ("okl-tokens", "tokens"),
                         "the Secret okl-tokens' key `tokens` is the image's --auth_tokens_file")
        (mount,) = [m for m in container["volumeMounts"]
                    if m["mountPath"] == os.path.dirname(TOKENS_PATH)]
        self.assertTrue(mount.get("readOnly"))
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        mode = volume.get("projected", volume.get("secret", {})).get("defaultMode")
        self.assertEqual(mode & 0o007, 0, "the tokens file is not world-readable: %o" % mode)
        self.assertEqual(self.by_kind.get("Secret", []), [],
                         "Secrets are created with kubectl from deploy/secrets, not rendered")
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


def kubectl_supports_components():
    out = run([ARGS.kubectl, "version", "--client", "-o", "yaml"])
    version = yaml.safe_load(out)["clientVersion"]
    return (int(version["major"]), int(re.match(r"\d+", version["minor"]).group())) >= (1, 21)


class KustomizeTlsTest(unittest.TestCase):
    """deploy/k8s with the Component deploy/k8s/tls, rendered from a temporary overlay."""

    @classmethod
    def setUpClass(cls):
        if not kubectl_supports_components():
            raise unittest.SkipTest("kustomize Components need kubectl 1.21+")
        overlay = tempfile.mkdtemp(prefix="okl_deploy_config_test.")
        try:
            base = os.path.relpath(deploy_path("k8s"), overlay)  # kustomize refuses absolute
            with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
                f.write("resources: [%s]\ncomponents: [%s/tls]\n" % (base, base))
            cls.objects, cls.by_kind = render(overlay)
        finally:
            shutil.rmtree(overlay, ignore_errors=True)

    def one(self, kind, name):
        (found,) = [o for o in self.by_kind[kind] if o["metadata"]["name"] == name]
        return found

    def test_server_serves_tls_from_the_secret_and_probes_with_okl_health(self):
        pod = self.one("StatefulSet", "okl")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        files = mounted_files(pod, container)
        self.assertEqual(files[TOKENS_PATH], ("okl-tokens", "tokens"))
        args = container["args"]
        for flag, key in (("tls_cert_file", "tls.crt"), ("tls_key_file", "tls.key")):
            (path,) = flag_values(args, flag)
            self.assertEqual(files.get(path), ("okl-tls", key), flag)
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            command = container[probe]["exec"]["command"]
            self.assertEqual(command[:3], ["okl", "health", "--server=127.0.0.1:50051"], probe)
            (ca,) = flag_values(command, "tls_ca")
            self.assertEqual(files.get(ca), ("okl-tls", "ca.crt"), probe)
            if flag_values(args, "tls_client_ca_file"):
                self.assertTrue(flag_values(command, "tls_cert"), probe)
            self.assertGreater(container[probe]["timeoutSeconds"],
                               duration_seconds(flag_values(command, "timeout")[0]), probe)
        for service in self.by_kind["Service"]:
            for port in service["spec"]["ports"]:
                if port["name"] == "grpc":
                    self.assertNotIn("appProtocol", port, "gRPC over TLS is not h2c")

    def test_router_uses_envoy_tls_yaml_and_mounts_what_it_reads(self):
        deployment = self.one("Deployment", "okl-router")
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        (volume,) = [v for v in pod["volumes"] if "configMap" in v]
        config_map = self.one("ConfigMap", volume["configMap"]["name"])
        with open(deploy_path("k8s", "tls", "envoy.yaml")) as f:
            text = f.read()
        self.assertEqual(config_map["data"]["envoy.yaml"], text)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        (tls_volume,) = [v for v in pod["volumes"] if v["name"] == mounts["/etc/okl/tls"]]
        self.assertEqual(tls_volume["secret"]["secretName"], "okl-tls")
        self.assertEqual(pod["securityContext"].get("fsGroup"), pod["securityContext"]["runAsGroup"],
                         "Envoy's group reads the key")
        for path in set(re.findall(r"filename: (\S+) ", text)):
            self.assertTrue(path.startswith("/etc/okl/tls/"), path)
            self.assertIn(os.path.basename(path), ("tls.crt", "tls.key", "ca.crt"), path)


class EnvoyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(deploy_path("envoy", "envoy.yaml")) as f:
            cls.config = yaml.safe_load(f)
        with open(deploy_path("k8s", "tls", "envoy.yaml")) as f:
            cls.tls_config = yaml.safe_load(f)
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

    def test_tls_config_is_the_plaintext_one_plus_tls_on_both_hops(self):
        tls = copy.deepcopy(self.tls_config)
        (listener,) = tls["static_resources"]["listeners"]
        (chain,) = listener["filter_chains"]
        downstream = chain.pop("transport_socket")["typed_config"]
        (cluster,) = [c for c in tls["static_resources"]["clusters"] if c["name"] == "okl"]
        upstream = cluster.pop("transport_socket")["typed_config"]
        self.assertEqual(tls, self.config, "deploy/k8s/tls/envoy.yaml differs from "
                         "deploy/envoy/envoy.yaml in more than its transport sockets")
        self.assertTrue(downstream["@type"].endswith("tls.v3.DownstreamTlsContext"))
        self.assertTrue(upstream["@type"].endswith("tls.v3.UpstreamTlsContext"))
        # gRPC needs ALPN h2 on TLS, both towards clients and towards okl_server.
        for context in (downstream, upstream):
            self.assertEqual(context["common_tls_context"]["alpn_protocols"], ["h2"])
        (certificate,) = downstream["common_tls_context"]["tls_certificates"]
        self.assertEqual(certificate["certificate_chain"]["filename"], "/etc/okl/tls/tls.crt")
        self.assertEqual(certificate["private_key"]["filename"], "/etc/okl/tls/tls.key")
        validation = upstream["common_tls_context"]["validation_context"]
        self.assertEqual(validation["trusted_ca"]["filename"], "/etc/okl/tls/ca.crt")
        self.assertTrue(validation["match_typed_subject_alt_names"])


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
