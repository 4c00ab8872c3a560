"""Run the real `function` console script on loopback and talk to it over gRPC."""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.patience import HANG

FUNCTION = Path(sys.executable).parent / "function"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def function_server(*args: str) -> Iterator[str]:
    """Start `function ARGS --address 127.0.0.1:PORT`; yield the address; stop it."""
    address = f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env.pop("TLS_SERVER_CERTS_DIR", None)
    process = subprocess.Popen(
        [str(FUNCTION), *args, "--address", address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield address
    finally:
        process.terminate()  # it drains (its grace period) and exits
        try:
            process.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(
                f"the function server had not exited {HANG:.0f} s after SIGTERM"
            ) from None


READY_BOUND = HANG  # a server that has not answered by then hangs; a busy machine is slower


def wait_ready(channel: grpc.Channel, timeout: float = READY_BOUND) -> None:
    """Until the server answers: probed every second, within a generous overall bound (a busy
    2-core machine takes well over the 20 s this once waited), reported when it is reached."""
    ready, started = grpc.channel_ready_future(channel), time.monotonic()
    while True:
        try:
            ready.result(timeout=1)
            return
        except grpc.FutureTimeoutError:
            waited = time.monotonic() - started
            if waited >= timeout:
                raise TimeoutError(
                    f"the function server did not answer in {waited:.0f} s"
                ) from None


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(subject: str, key, issuer_key=None, issuer_name=None, ca=False):
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


def throwaway_pki(directory: Path) -> dict[str, bytes]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all throw-away.

    Writes the server's `tls.crt`, `tls.key`, `ca.crt` into `directory` (as Crossplane mounts
    them) and returns the client's PEMs.
    """
    ca_key = _key()
    ca = _certificate("gpustack-test-ca", ca_key, ca=True)
    server_key, client_key = _key(), _key()
    server = _certificate("localhost", server_key, ca_key, ca.subject)
    client = _certificate("crossplane", client_key, ca_key, ca.subject)
    pem = serialization.Encoding.PEM
    (directory / "tls.crt").write_bytes(server.public_bytes(pem))
    (directory / "tls.key").write_bytes(_pem(server_key))
    (directory / "ca.crt").write_bytes(ca.public_bytes(pem))
    return {"ca": ca.public_bytes(pem), "cert": client.public_bytes(pem), "key": _pem(client_key)}
