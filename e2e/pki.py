"""The certificates a control plane on loopback needs, made with `cryptography`.

One cluster CA signs the API server's serving certificate and every client's certificate; the
service-account key pair signs tokens. Kueue and Crossplane make their own CAs in the cluster,
as they do in production; the function's serving certificate is signed by Crossplane's
(`function_certificate`).
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey):
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(_pem_key(key))
    pair.key.chmod(0o600)
    return pair


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


def certificate_authority(directory: Path, name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _write(directory, name, cert, key)


def signed(
    directory: Path,
    name: str,
    ca: KeyPair,
    common_name: str,
    organization: str = "",
    hosts: tuple[str, ...] = (),
) -> KeyPair:
    """A leaf certificate signed by `ca`: a server's when `hosts` are given, else a client's."""
    with warnings.catch_warnings():
        # Crossplane's root CA names its country "Earth", which cryptography warns is not a
        # two-letter code: its subject is copied as the issuer, never judged.
        warnings.simplefilter("ignore", UserWarning)
        issuer = x509.load_pem_x509_certificate(ca.cert.read_bytes()).subject
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + (
        [ExtendedKeyUsageOID.SERVER_AUTH] if hosts else []
    )
    builder = _builder(x509.Name(names), issuer, key.public_key()).add_extension(
        x509.ExtendedKeyUsage(usages), critical=False
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(host) for host in hosts]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return _write(directory, name, cert, key)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def service_account_keys(directory: Path) -> KeyPair:
    """The key pair the API server verifies and the controller manager signs tokens with."""
    key = ec.generate_private_key(ec.SECP256R1())
    pair = KeyPair(directory / "service-account.pub", directory / "service-account.key")
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    pair.key.write_bytes(_pem_key(key))
    pair.key.chmod(0o600)
    return pair
