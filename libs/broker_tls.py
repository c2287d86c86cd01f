"""TLS for `make run-cluster`'s nodes: a certificate authority of the run's own and a server
certificate for 127.0.0.1, made fresh at each start (nothing to install or renew).

The nodes require TLS on their client port; every child verifies them against the run's CA
(`NATS_TLS_CA`). The routes between nodes stay plain on loopback. Kubernetes gets its
certificates from cert-manager instead (deploy/nats/tls/certificates.yaml).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from libs.broker_access import cluster_access, write_private

# Longer than any run; a new run makes new ones.
_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ClusterTls:
    """Where the run's CA and the nodes' certificate and key were written."""

    ca: Path
    cert: Path
    key: Path

    def server_block(self) -> str:
        """The nodes' `tls` block (their client port)."""
        return (
            "tls {\n"
            f"  cert_file: {json.dumps(str(self.cert))}\n"
            f"  key_file: {json.dumps(str(self.key))}\n"
            "}\n"
        )


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def cluster_tls(directory: Path) -> ClusterTls:
    """Make the run's CA and a server certificate for 127.0.0.1 and localhost."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("holdline run-cluster CA"))
        .issuer_name(_name("holdline run-cluster CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    found = ClusterTls(
        ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server-key.pem"
    )
    found.ca.write_text(_pem(ca))
    found.cert.write_text(_pem(cert))
    write_private(
        found.key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )
    return found


def cluster_security(directory: Path) -> tuple[str, dict[str, dict[str, str]]]:
    """The nodes' `tls` and `authorization` blocks, and each service package's broker
    settings (its user, and the run's CA to verify the nodes with)."""
    tls = cluster_tls(directory)
    auth, env = cluster_access(directory, {"NATS_TLS_CA": str(tls.ca)})
    return tls.server_block() + auth, env
