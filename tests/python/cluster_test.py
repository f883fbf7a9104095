"""The package through the local cluster's router (deploy/cluster/local_cluster.sh: two
okl_server replicas behind nginx, routing by the x-okl-tenant header, which the router
requires): every call of a tenant reaches the replica that holds its models."""

import collections
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import okl
from conftest import regression_config

REPLICAS = 2


def free_port_block(count):
    """A port p with p..p+count free right now (the router and its replicas). The kernel
    hands it out from its ephemeral range, which the system tests' fixed cluster ports
    (20060-20073) stay below."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no block of %d free ports" % (count + 1))


@pytest.fixture(scope="module")
def cluster(options, work_dir):
    if not os.access(options.nginx, os.X_OK):
        raise AssertionError("no nginx at %s (scripts/install_deps.sh installs it)"
                             % options.nginx)
    script = os.path.join(options.repo, "deploy", "cluster", "local_cluster.sh")
    env = dict(os.environ, OKL_CLUSTER_DIR=os.path.join(work_dir, "cluster"),
               OKL_CLUSTER_PORT=str(free_port_block(REPLICAS)), OKL_SERVER=options.server,
               OKL_CLI=options.cli, OKL_NGINX=options.nginx)

    def run(*argv):
        done = subprocess.run([script] + list(argv), env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, "local_cluster.sh %s: %s%s" % (argv, done.stdout,
                                                                   done.stderr)
        return done.stdout

    try:
        lines = [line.split() for line in run("start", str(REPLICAS)).splitlines()]
        router = [fields[1] for fields in lines if fields[0] == "router"][0]
        replicas = [fields[1] for fields in lines if fields[0] == "replica"]
        yield router, replicas
    finally:
        run("stop")


def test_every_call_through_the_router_reaches_the_tenants_replica(cluster, rng, options):
    router_address, replica_addresses = cluster
    router = okl.Client(router_address)
    replicas = [okl.Client(address) for address in replica_addresses]
    # Four tenants of each replica, chosen by nginx's ring (deploy/cluster/nginx_ring.py):
    # the ring hashes the replicas' ports, which differ from run to run.
    sys.path.insert(0, os.path.join(options.repo, "deploy", "cluster"))
    import nginx_ring
    ring = nginx_ring.Ring(replica_addresses)
    owner, held_by = {}, collections.Counter()
    for name in ("routed-%d" % i for i in range(1000)):
        replica = ring.owner(name)
        if held_by[replica] < 4:
            owner[name] = replica
            held_by[replica] += 1
    tenants = sorted(owner)
    assert len(tenants) == 4 * REPLICAS, owner
    X = rng.normal(size=(600, 2))
    y = X[:, 0] * X[:, 1]
    for tenant in tenants:
        model = router.create_model(tenant, "m", regression_config(2))
        model.observe(X[:200], y[:200])
        with model.stream(batch_size=50) as stream:
            stream.observe(X[200:400], y[200:400])
        model.observe(X[400:], y[400:])  # more than one request: the streamed path
    holders = {tenant: [i for i, replica in enumerate(replicas)
                        if replica.list_models(tenant)] for tenant in tenants}
    assert all(held == [replica_addresses.index(owner[tenant])]
               for tenant, held in holders.items()), (holders, owner)
    for tenant in tenants:
        routed = router.model(tenant, "m")
        direct = replicas[holders[tenant][0]].model(tenant, "m")
        assert routed.stats().steps == direct.stats().steps == 600
        np.testing.assert_array_equal(routed.predict(X[:20]), direct.predict(X[:20]))
        assert [m.model for m in router.list_models(tenant)] == ["m"]
        snapshot = routed.snapshot_bytes()
        assert snapshot == direct.snapshot_bytes()
        router.restore(tenant, "copy", snapshot)
        assert direct.client.model(tenant, "copy").snapshot_bytes() == snapshot
        routed.delete()
        with pytest.raises(okl.NotFound):
            direct.stats()
    # ListModels of every tenant names none: the router refuses it, saying why.
    with pytest.raises(okl.InvalidArgument, match="x-okl-tenant"):
        router.list_models()
    assert router.health()
    for connection in [router] + replicas:
        connection.close()
