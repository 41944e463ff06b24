#!/usr/bin/env python3
"""Write a single-layer OCI image archive (an OCI image layout in a tar) from a
root filesystem directory, without any container tool.

    oci-image.py --rootfs DIR --name lockstep.local/pause:3.10 --out pause.tar \
        [--entrypoint '["/pause"]'] [--cmd '[]'] [--env K=V ...] [--workdir /]
        [--user 65532:65532] [--label K=V ...]

The archive holds `oci-layout`, `index.json` and `blobs/sha256/*` (an
uncompressed layer, the image config, the manifest). `index.json` names the
image with the `io.containerd.image.name` annotation, so
`ctr -n k8s.io images import pause.tar` registers it under --name. The layer tar
is reproducible: entries sorted, mtimes 0, numeric owners kept from DIR.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rootfs", required=True)
    p.add_argument("--name", required=True, help="full reference, e.g. lockstep.local/etcd:v3.6.16")
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", default=None, help="JSON list")
    p.add_argument("--cmd", default=None, help="JSON list")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    p.add_argument("--user", default="")
    p.add_argument("--label", action="append", default=[])
    a = p.parse_args()

    out_dir = os.path.dirname(os.path.abspath(a.out))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".oci-") as tmp:
        blobs = os.path.join(tmp, "blobs", "sha256")
        os.makedirs(blobs)
        layer = os.path.join(tmp, "layer.tar")
        subprocess.run(
            ["tar", "-C", a.rootfs, "--sort=name", "--mtime=@0", "--numeric-owner",
             "--xattrs", "--xattrs-include=security.capability", "-cf", layer, "."],
            check=True,
        )
        layer_digest = sha256_file(layer)
        layer_size = os.path.getsize(layer)
        os.rename(layer, os.path.join(blobs, layer_digest))

        def put(obj):
            data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
            digest = hashlib.sha256(data).hexdigest()
            with open(os.path.join(blobs, digest), "wb") as f:
                f.write(data)
            return digest, len(data)

        env = a.env
        if not any(e.startswith("PATH=") for e in env):
            env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + env
        cfg = {"Env": env, "WorkingDir": a.workdir}
        if a.entrypoint is not None:
            cfg["Entrypoint"] = json.loads(a.entrypoint)
        if a.cmd is not None:
            cfg["Cmd"] = json.loads(a.cmd)
        if a.user:
            cfg["User"] = a.user
        if a.label:
            cfg["Labels"] = dict(kv.split("=", 1) for kv in a.label)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tools/images/oci-image.py"}],
        }
        cfg_digest, cfg_size = put(config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": "sha256:" + cfg_digest, "size": cfg_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": "sha256:" + layer_digest, "size": layer_size}],
        }
        man_digest, man_size = put(manifest)
        tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": "sha256:" + man_digest, "size": man_size,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": a.name,
                                "org.opencontainers.image.ref.name": tag},
            }],
        }
        with open(os.path.join(tmp, "index.json"), "w") as f:
            json.dump(index, f, sort_keys=True)
        with open(os.path.join(tmp, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        part = a.out + ".part"
        subprocess.run(["tar", "-C", tmp, "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                        "-cf", part, "oci-layout", "index.json", "blobs"], check=True)
        os.rename(part, a.out)
    print(f"{a.name} sha256:{man_digest} layer {layer_size // 1024} KiB -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
