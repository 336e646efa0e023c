#!/usr/bin/env python3
"""hub_interop.py: does `iris pull` leave the cache huggingface_hub leaves?

A small mock of the Hugging Face Hub (the same endpoints and headers as
tests/hub_mock.c: /api/models/.../revision/..., /resolve/ with ETag,
X-Linked-Etag, X-Linked-Size, X-Repo-Commit and a 302 to a CDN path for LFS
files, Range support) serves a tiny deterministic repo.

  python3 tools/hub_interop.py serve PORT
      run the mock (for `HF_ENDPOINT=http://127.0.0.1:PORT iris pull tiny/qwen3-vl`)
  python3 tools/hub_interop.py check --iris-tar CACHE.tar --out DIR
      on the GPU machine (huggingface_hub + transformers installed, no network):
      download the same repo with huggingface_hub.snapshot_download from the
      mock into a fresh cache, compare it file by file with the cache iris
      made (CACHE.tar, made locally against this same mock), then open the
      iris cache offline with huggingface_hub (hf_hub_download,
      scan_cache_dir) and transformers (AutoConfig) and safetensors.
      Writes DIR/interop.json and DIR/hf_cache.tar (huggingface_hub's cache,
      for checking that iris reads it).
"""
import hashlib
import http.server
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading

REPO = "tiny/qwen3-vl"
COMMIT = "4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"
IRIS_FILES = ["config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
              "tokenizer_config.json", "chat_template.json", "chat_template.jinja", "*.safetensors",
              "model.safetensors.index.json", "vocab.json", "merges.txt", "special_tokens_map.json",
              "added_tokens.json", "video_preprocessor_config.json"]


def make_files():
    rng = random.Random(1234)
    header = json.dumps({"w": {"dtype": "F32", "shape": [150000], "data_offsets": [0, 600000]}}).encode()
    st = struct.pack("<Q", len(header)) + header + bytes(rng.getrandbits(8) for _ in range(600000))
    return {
        "config.json": (b'{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", '
                        b'"text_config": {"hidden_size": 64}}\n', False),
        "generation_config.json": (b'{"do_sample": true, "temperature": 0.7}\n', False),
        "tokenizer.json": (b'{"version": "1.0", "model": {"type": "BPE"}}\n', False),
        "README.md": (b"# tiny\n", False),
        "onnx/model.onnx": (b"not wanted", True),
        "model.safetensors": (st, True),
    }


FILES = make_files()


def git_sha1(b):
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def pointer(b):
    return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
            % (hashlib.sha256(b).hexdigest(), len(b))).encode()


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def route(self):
        path = self.path.split("?")[0]
        port = self.server.server_address[1]
        if path.startswith("/api/models/"):
            parts = path[len("/api/models/"):].split("/")
            repo = "/".join(parts[:2])
            if repo != REPO:
                return self.send(401, b'{"error":"Repository not found"}', [("X-Error-Code", "RepoNotFound")])
            if len(parts) > 2 and parts[2] == "tree":
                # huggingface_hub >= 1.x lists files with the tree API (recursive), not siblings.
                entries = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": "onnx"}]
                for name, (b, lfs) in FILES.items():
                    e = {"type": "file", "oid": git_sha1(pointer(b) if lfs else b), "size": len(b), "path": name}
                    if lfs:
                        e["lfs"] = {"oid": hashlib.sha256(b).hexdigest(), "size": len(b), "pointerSize": 134}
                    entries.append(e)
                return self.send(200, json.dumps(entries).encode(), [("Content-Type", "application/json")])
            sib = []
            for name, (b, lfs) in FILES.items():
                s = {"rfilename": name, "size": len(b), "blobId": git_sha1(pointer(b) if lfs else b)}
                if lfs:
                    s["lfs"] = {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b), "pointerSize": 134}
                sib.append(s)
            body = json.dumps({"id": REPO, "modelId": REPO, "sha": COMMIT, "private": False, "gated": False,
                               "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                               "siblings": sib}).encode()
            return self.send(200, body, [("Content-Type", "application/json")])
        if path.startswith("/cdn/"):
            sha = path[5:]
            for name, (b, lfs) in FILES.items():
                if hashlib.sha256(b).hexdigest() == sha:
                    rng = self.headers.get("Range")
                    start = int(rng[6:].split("-")[0]) if rng else 0
                    hdrs = [("ETag", '"%s"' % sha), ("Accept-Ranges", "bytes")]
                    if rng:
                        hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, len(b) - 1, len(b))))
                    return self.send(206 if rng else 200, b[start:], hdrs)
            return self.send(404)
        parts = path.lstrip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            if repo != REPO:
                return self.send(401, b"", [("X-Error-Code", "RepoNotFound")])
            if name not in FILES:
                return self.send(404, b"", [("X-Error-Code", "EntryNotFound")])
            b, lfs = FILES[name]
            if not lfs:
                return self.send(200, b, [("ETag", '"%s"' % git_sha1(b)), ("X-Repo-Commit", COMMIT),
                                          ("Accept-Ranges", "bytes")])
            sha = hashlib.sha256(b).hexdigest()
            # Like the real Hub, the 302 has no body but tells the LFS size and etag.
            self.send_response(302)
            for k, v in [("ETag", '"%s"' % git_sha1(pointer(b))), ("X-Linked-Etag", '"%s"' % sha),
                         ("X-Linked-Size", str(len(b))), ("X-Repo-Commit", COMMIT),
                         ("Location", "http://%s:%d/cdn/%s?X-Amz-Signature=abc" % (self.server.cdn_host, port, sha)),
                         ("Content-Length", "0")]:
                self.send_header(k, v)
            self.end_headers()
            return
        return self.send(404)


def serve(port):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hub)
    srv.daemon_threads = True
    srv.cdn_host = "localhost"  # another host name than the Hub's, as the real CDN is
    return srv


def tree(root):
    """{relative path: ("link", target) | ("file", sha256)} under root, .locks and .incomplete left out."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in fns + [d for d in dns if os.path.islink(os.path.join(dp, d))]:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(".locks") or rel.endswith(".incomplete"):
                continue
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


OFFLINE_CHECK = r'''
import json, os, traceback
r = {}
def step(name, fn):
    try:
        r[name] = fn()
    except Exception:
        r[name + "_error"] = traceback.format_exc()[-1500:]
cache = os.environ["HF_HUB_CACHE"]
from huggingface_hub import hf_hub_download, snapshot_download, scan_cache_dir
step("snapshot", lambda: os.path.relpath(snapshot_download("tiny/qwen3-vl"), cache))
step("config_path", lambda: os.path.relpath(hf_hub_download("tiny/qwen3-vl", "config.json"), cache))
def scan():
    info = scan_cache_dir()
    return {"warnings": [str(w) for w in info.warnings],
            "repos": [{"repo": x.repo_id, "size": x.size_on_disk, "nb_files": x.nb_files,
                       "refs": sorted(ref for rev in x.revisions for ref in rev.refs)} for x in info.repos]}
step("scan", scan)
def st():
    from safetensors import safe_open
    with safe_open(os.path.join(cache, r["snapshot"], "model.safetensors"), "pt") as f:
        return list(f.get_slice("w").get_shape())
step("tensor_w_shape", st)
def cfg():
    import transformers
    c = transformers.AutoConfig.from_pretrained("tiny/qwen3-vl")
    return {"class": type(c).__name__, "model_type": c.model_type}
step("autoconfig", cfg)
print(json.dumps(r))
'''


def check(iris_tar, out_dir):
    import huggingface_hub
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hub-interop-")
    srv = serve(0)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    result = {"huggingface_hub": huggingface_hub.__version__}
    try:
        import transformers
        result["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        result["transformers"] = repr(e)

    # 0. The mock answers plain urllib (tells a mock problem from a client one).
    import urllib.request
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open("http://127.0.0.1:%d/api/models/%s/revision/main" % (port, REPO), timeout=10) as r:
            result["urllib_api"] = {"status": r.status, "sha": json.loads(r.read())["sha"]}
    except Exception as e:  # noqa: BLE001
        result["urllib_api"] = repr(e)
    result["proxy_env"] = sorted(k for k in os.environ if "proxy" in k.lower() or k.startswith("HF_"))
    print("urllib:", result["urllib_api"], "env:", result["proxy_env"], flush=True)

    # 1. huggingface_hub downloads the repo from the mock (iris's file selection);
    # if the CDN host name "localhost" does not work on this machine, 127.0.0.1.
    for host in ("localhost", "127.0.0.1"):
        srv.cdn_host = host
        hf_cache = os.path.join(work, "hf-" + host)
        env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:%d" % port, HF_HUB_CACHE=hf_cache,
                   HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
        for k in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HOME", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                  "ALL_PROXY", "all_proxy", "TRANSFORMERS_OFFLINE"):
            env.pop(k, None)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        code = ("from huggingface_hub import snapshot_download; import sys, json; "
                "print(snapshot_download(%r, allow_patterns=%r))" % (REPO, IRIS_FILES))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        result["hf_download_" + host] = {"rc": p.returncode, "stdout": p.stdout[-2000:], "stderr": p.stderr[-6000:]}
        print("snapshot_download (CDN host %s): rc %d\n%s%s" % (host, p.returncode, p.stdout[-1000:],
                                                                 p.stderr[-6000:]), flush=True)
        result["hf_download"] = result["hf_download_" + host]
        if p.returncode == 0:
            break
    os.makedirs(hf_cache, exist_ok=True)

    try:
        compare_and_read(result, iris_tar, hf_cache, work, out_dir)
    except Exception:  # noqa: BLE001
        import traceback
        result["error"] = traceback.format_exc()[-3000:]
        print(result["error"])
    result["ok"] = (result["hf_download"]["rc"] == 0 and not result.get("tree_differences", ["?"])
                    and "autoconfig" in result.get("offline_on_iris_cache", {}))
    with open(os.path.join(out_dir, "interop.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(json.dumps({k: result.get(k) for k in ("ok", "tree_differences", "huggingface_hub", "transformers")},
                     indent=1))
    print(json.dumps(result.get("offline_on_iris_cache"), indent=1)[:3000])
    srv.shutdown()
    return 0 if result["ok"] else 1


def compare_and_read(result, iris_tar, hf_cache, work, out_dir):
    # 2. The cache iris made against the same mock (locally), unpacked here.
    iris_cache = os.path.join(work, "iris")
    os.makedirs(iris_cache)
    with tarfile.open(iris_tar) as t:
        t.extractall(iris_cache)
    folder = "models--" + REPO.replace("/", "--")
    a, b = tree(os.path.join(hf_cache, folder)), tree(os.path.join(iris_cache, folder))
    result["hf_tree"] = a
    result["iris_tree"] = b
    result["tree_differences"] = sorted(
        ["%s: huggingface_hub %s, iris %s" % (k, a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)])

    # 3. huggingface_hub and transformers read the iris cache offline.
    env2 = dict(os.environ, HF_HUB_CACHE=iris_cache, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:1")
    env2.pop("HF_HOME", None)
    p = subprocess.run([sys.executable, "-c", OFFLINE_CHECK], env=env2, capture_output=True, text=True, timeout=300)
    try:
        result["offline_on_iris_cache"] = json.loads(p.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001
        result["offline_on_iris_cache"] = {"rc": p.returncode, "stdout": p.stdout[-2000:], "stderr": p.stderr[-4000:]}

    with tarfile.open(os.path.join(out_dir, "hf_cache.tar"), "w") as t:
        t.add(hf_cache, arcname=".")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(int(sys.argv[2])).serve_forever()
    elif len(sys.argv) >= 2 and sys.argv[1] == "check":
        args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
        sys.exit(check(args["--iris-tar"], args["--out"]))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
