"""The principal of a TLS client: its certificate's subject DN through Kafka's
``SslPrincipalMapper`` (``ssl.principal.mapping.rules``).

The DN is written as Java's ``X500Principal.getName()`` (RFC 2253): most specific RDN
first, no spaces, ``CN=client,OU=eng,O=Example,C=US``. Rules, in order, the first that
matches wins (Kafka's syntax)::

    RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L    pattern / replacement ($n groups) / L or U case
    DEFAULT                             the DN itself

A DN no rule matches fails the authentication, as Kafka's ``NoMatchingRule`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kompakt.errors import InvalidConfigError

# Kafka's SslPrincipalMapper.RULE_SPLITTER / RULE_PARSER
_RULE_SPLITTER = re.compile(
    r"\s*(DEFAULT|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?)\s*([,\n]\s*|$)"
)
_RULE_PARSER = re.compile(r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?)")


class NoMatchingRule(Exception):
    pass


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        out = m.expand(self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(text: str) -> str:
    """Java's ``$1`` group references as Python's ``\\g<1>``; ``\\/`` as ``/``."""
    text = text.replace("\\/", "/")
    return re.sub(r"\$(\d+)", r"\\g<\1>", text)


class PrincipalMapper:
    def __init__(self, rules: str = "DEFAULT"):
        self.rules: list[_Rule] = []
        text = rules.strip()
        pos = 0
        while pos < len(text):
            m = _RULE_SPLITTER.match(text, pos)
            if m is None or m.end() == pos:
                raise InvalidConfigError(
                    f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                    f"invalid rule at character {pos}"
                )
            p = _RULE_PARSER.match(m.group(1))
            assert p is not None
            if p.group(1):
                self.rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(p.group(2).replace("\\/", "/"))
                except re.error as exc:
                    raise InvalidConfigError(
                        f"Invalid value {rules} for configuration "
                        f"ssl.principal.mapping.rules: {exc}"
                    ) from exc
                self.rules.append(_Rule(pattern, _java_replacement(p.group(4)), p.group(6)))
            pos = m.end()
        if not self.rules:
            self.rules.append(_Rule(None))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.rules}")


def cert_principal(mapper: PrincipalMapper, der: bytes) -> str:
    """``User:<name>`` of a DER client certificate: its subject DN through the rules, for
    a Kafka TLS connection and an https admin request alike; NoMatchingRule if none
    applies (the authentication fails)."""
    return "User:" + mapper.name(subject_dn(der))


def subject_dn(der: bytes) -> str:
    """The subject DN of a DER certificate in RFC 2253 form (Java's getName())."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
