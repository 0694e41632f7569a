"""A real S3 server for the tests of the remote tier: moto's server mode (moto[server], pinned in
scripts/requirements.txt) on 127.0.0.1 on a free port, stopped by its PID; and FaultProxy, an HTTP
proxy between a mount and the server that injects the store's failures (503 SlowDown, 500, a
connection reset in the middle of a request body, a delay) and records every request it passed.

    with MotoServer() as s3:
        s3.create_bucket("ckpt")
        with FaultProxy(s3.endpoint) as proxy:
            proxy.inject("slowdown", method="PUT", count=2)
            ... mount with remote_endpoint=proxy.endpoint ...
"""

import http.client
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

import boto3

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "ckptfs-test-key",
               "AWS_SECRET_ACCESS_KEY": "ckptfs-test-secret", "AWS_REGION": "us-east-1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """moto_server on 127.0.0.1 for one `with` block; its log in a temp file."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        binary = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.log = tempfile.NamedTemporaryFile(prefix="ckptfs-moto-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}: "
                                   + self.output())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not listen within 30 s: " + self.output())
                time.sleep(0.05)

    def stop(self):
        """Stops the server this object started (by its PID), then removes its log."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
            os.unlink(self.log.name)
            self.log = None

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

    def create_bucket(self, name):
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket, prefix=""):
        """{key: bytes} of every object under prefix."""
        c = self.client()
        out = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        return out


# The S3 error answers the proxy gives.
_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "baddigest": (400, "BadDigest",
                  "The CRC32C you specified did not match the calculated checksum."),
}


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 to `upstream` (a moto endpoint). inject() queues faults for
    the next requests that match; every request passed is recorded in `log` as (start, end,
    method, path, status, headers) with monotonic times (start: its headers read; end: the
    answer in hand, before the client has it); `injected` counts the faults given by
    kind. go_down() makes the store unreachable (the port refuses connections, open ones are reset
    at their next request) until come_back() listens again on the same port."""

    def __init__(self, upstream):
        self.upstream = upstream.split("://", 1)[1]
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.faults = []  # [kind, method, query_part, count, delay]
        self.injected = {}
        self.log = []
        self.down = False
        self._listen()

    def _listen(self):
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if not self.down:
            self.server.shutdown()
            self.server.server_close()
        return False

    def go_down(self):
        with self.lock:
            self.down = True
        self.server.shutdown()
        self.server.server_close()

    def come_back(self):
        self._listen()
        self.thread.start()
        with self.lock:
            self.down = False

    def inject(self, kind, method=None, query_part=None, count=1, delay=0.0):
        """The next `count` requests with `method` (any when None) whose path has `query_part`
        (e.g. "partNumber=") get fault `kind`: "slowdown" (503 SlowDown), "500" (500
        InternalError), "baddigest" (400 BadDigest, as S3 answers bytes that do not match the
        checksum sent with them), "reset" (the connection reset after half the body was read),
        or "delay" (passed on after `delay` seconds). An error is answered `delay` seconds after
        the whole body was read."""
        with self.lock:
            self.faults.append([kind, method, query_part, count, delay])

    def _fault_for(self, method, path):
        with self.lock:
            for f in self.faults:
                kind, m, q, count, delay = f
                if count > 0 and (m is None or m == method) and (q is None or q in path):
                    f[3] -= 1
                    self.injected[kind] = self.injected.get(kind, 0) + 1
                    return kind, delay
        return None, 0.0

    def _serve(self, conn):
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline(65536)
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers = []
                while True:
                    h = reader.readline(65536)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    name, value = h.decode("latin-1").split(":", 1)
                    headers.append((name.strip(), value.strip()))
                length = int(next((v for n, v in headers if n.lower() == "content-length"), "0"))
                start = time.monotonic()
                with self.lock:
                    down = self.down
                if down:
                    self._reset(conn)
                    return
                kind, delay = self._fault_for(method, path)
                if kind == "reset":
                    reader.read(length // 2)
                    self._reset(conn)
                    return
                body = reader.read(length) if length else b""
                if len(body) < length:
                    return  # The client went away in the middle: a store never takes that.
                if kind in _ERRORS:
                    time.sleep(delay)
                    status, code, message = _ERRORS[kind]
                    payload = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}"
                               f"</Code><Message>{message}</Message></Error>").encode()
                    conn.sendall(f"HTTP/1.1 {status} Error\r\nContent-Type: application/xml\r\n"
                                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                    self._record(start, method, path, status, headers)
                    continue
                if kind == "delay":
                    time.sleep(delay)
                up = http.client.HTTPConnection(self.upstream, timeout=120)
                skip = {"connection", "transfer-encoding", "content-length", "expect"}
                up.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for n, v in headers:
                    if n.lower() not in skip:
                        up.putheader(n, v)
                up.putheader("Content-Length", str(len(body)))
                up.endheaders(body)
                resp = up.getresponse()
                data = resp.read()
                answered = time.monotonic()  # Before the client can know of the answer.
                out = [f"HTTP/1.1 {resp.status} {resp.reason}\r\n"]
                for n, v in resp.getheaders():
                    if n.lower() not in ("connection", "transfer-encoding", "content-length"):
                        out.append(f"{n}: {v}\r\n")
                length_out = resp.getheader("Content-Length") if method == "HEAD" else len(data)
                out.append(f"Content-Length: {length_out or 0}\r\n\r\n")
                up.close()
                conn.sendall("".join(out).encode("latin-1") + data)
                self._record(start, method, path, resp.status, headers, answered)
        except (ConnectionError, OSError, ValueError):
            return

    @staticmethod
    def _reset(conn):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()

    def _record(self, start, method, path, status, headers, end=None):
        end = time.monotonic() if end is None else end
        with self.lock:
            self.log.append((start, end, method, path, status, dict(headers)))


def signature_matches(method, url, headers, secret, region="us-east-1"):
    """Whether the SigV4 signature in `headers` (as a client sent them to `url`) is the one
    botocore's signer computes for the same request with `secret`: an independent check of the
    signing, which moto's server does not verify. Returns (matches, expected, sent)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    lower = {k.lower(): v for k, v in headers.items()}
    auth = lower["authorization"]
    fields = dict(part.strip().split("=", 1) for part in auth.split(" ", 1)[1].split(","))
    access_key = fields["Credential"].split("/")[0]
    signed = fields["SignedHeaders"].split(";")
    request = AWSRequest(method=method, url=url, headers={h: lower[h] for h in signed})
    request.context["timestamp"] = lower["x-amz-date"]
    signer = S3SigV4Auth(Credentials(access_key, secret), "s3", region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return expected == fields["Signature"], expected, fields["Signature"]
