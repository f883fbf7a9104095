#!/usr/bin/env python3
"""Which replica nginx's `hash $http_x_okl_tenant consistent` sends a tenant to.

nginx's consistent hash (ngx_http_upstream_hash_module, "ketama"): each server
"HOST:PORT" of weight 1 gets 160 points on a ring of 32-bit CRC32 values; point j is
crc32(HOST, "\\0", PORT, point j-1 as 4 little-endian bytes), with point -1 = 0. A key goes
to the server of the first point at or after crc32(key), wrapping around. local_cluster.sh
uses this to know, before a replica joins the ring, which tenants it will own.

  nginx_ring.py --replicas=127.0.0.1:50061,127.0.0.1:50062 TENANT...
prints "TENANT ADDRESS" for each tenant (also read from stdin, one per line, with no
TENANT arguments).
"""

import argparse
import bisect
import struct
import sys
import zlib

POINTS_PER_SERVER = 160


class Ring:
    def __init__(self, servers):
        points = {}
        for server in servers:
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"a replica is HOST:PORT, got {server!r}")
            base = f"{host}\0{port}".encode()
            previous = 0
            for _ in range(POINTS_PER_SERVER):
                point = zlib.crc32(base + struct.pack("<I", previous))
                # nginx sorts the points and keeps the first of equal ones.
                points.setdefault(point, server)
                previous = point
        self._hashes = sorted(points)
        self._servers = [points[h] for h in self._hashes]

    def owner(self, key):
        index = bisect.bisect_left(self._hashes, zlib.crc32(key.encode()))
        return self._servers[index % len(self._hashes)]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", required=True,
                        help="the ring's servers, HOST:PORT,... as in nginx.conf")
    parser.add_argument("tenants", nargs="*")
    args = parser.parse_args(argv)
    ring = Ring([r for r in args.replicas.split(",") if r])
    tenants = args.tenants or [line.strip() for line in sys.stdin if line.strip()]
    for tenant in tenants:
        print(tenant, ring.owner(tenant))


if __name__ == "__main__":
    main(sys.argv[1:])
