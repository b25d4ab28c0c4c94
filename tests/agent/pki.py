"""A test PKI made with ``cryptography``: a CA and the certificates it issues, as PEM
files in a directory (for the TLS and mutual-TLS tests of the agent)."""

import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Pki", "loopback_san"]


def loopback_san() -> list[x509.GeneralName]:
    """The subject alternative name of a server on 127.0.0.1."""
    return [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          san: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in ``root``."""

    def __init__(self, root: pathlib.Path, name: str = "ca") -> None:
        self.root = root
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = _cert(f"gameday-test-{name}", self.ca_key, f"gameday-test-{name}",
                        self.ca_key, ca=True)
        self.ca_pem = self._write(f"{name}.crt", self.ca)

    def _write(self, filename: str, cert: x509.Certificate) -> pathlib.Path:
        path = self.root / filename
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def issue(self, stem: str, cn: str, san: list[x509.GeneralName]) -> tuple[pathlib.Path,
                                                                              pathlib.Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._write(f"{stem}.crt", _cert(cn, key, self.ca.subject.rfc4514_string()[3:],
                                                self.ca_key, san=san))
        key_path = self.root / f"{stem}.key"
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
        return cert, key_path
