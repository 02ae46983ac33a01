"""Every error the broker can answer with names a Kafka error code (Kafka's ``Errors``).

``kompakt.errors`` names codes as kio's ``ErrorCode`` members and resolves them on first
use (so the record layer and the CLI do not import kio); a misspelt name would only fail
when a client is being answered, so this walks every subclass now.
"""

import importlib
import pkgutil
import subprocess
import sys

from kio.schema.errors import ErrorCode

import kompakt
from kompakt.broker.handlers.common import error_of
from kompakt.errors import InvalidConfigError, KompaktError, SegmentsChangedError


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def test_every_kompakt_error_answers_with_a_kafka_error_code():
    for mod in pkgutil.walk_packages(kompakt.__path__, "kompakt."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    subclasses = list(_all_subclasses(KompaktError))
    assert len(subclasses) > 15
    for cls in [KompaktError, *subclasses]:
        assert isinstance(ErrorCode(cls.error_code), ErrorCode), cls


def test_error_of_answers_a_kompakt_error_with_its_code_and_our_bug_with_unknown():
    assert error_of(InvalidConfigError("bad")) == (ErrorCode.invalid_config, "bad")
    assert error_of(SegmentsChangedError("gone"))[0] is ErrorCode.unknown_server_error
    code, message = error_of(ZeroDivisionError("x"))
    assert code is ErrorCode.unknown_server_error
    assert message == "ZeroDivisionError: x"


def test_importing_kompakt_errors_does_not_import_kio():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, kompakt.errors; print('kio' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
