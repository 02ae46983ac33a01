"""The file names of a segment (Kafka's ``LogFileUtils``): ``<20-digit base offset>``
plus ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, and the suffixes a file wears
on its way in or out (``.cleaned``, ``.swap``, ``.deleted``)."""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INT32_MAX = 2**31 - 1


# the files of a segment (the .txnindex exists only once an abort was written to it)
SEGMENT_FILE_TYPES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
FILENAME_DIGITS = 20


def filename_prefix(offset: int) -> str:
    """The base offset as a file name stem: 20 digits, zero padded (Kafka's
    ``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{offset:0{FILENAME_DIGITS}d}"


def offset_from_name(name: str) -> int:
    """The base offset a segment file name starts with (``LogFileUtils.offsetFromFileName``)."""
    return int(name.split(".", 1)[0])


def segment_file(
    directory: Path | str, offset: int, kind: str = LOG_SUFFIX, suffix: str = ""
) -> Path:
    """The path of one file of segment ``offset``: ``kind`` is ``LOG_SUFFIX``,
    ``INDEX_SUFFIX``, ... and ``suffix`` a swap-protocol state (``CLEANED_SUFFIX``,
    ``SWAP_SUFFIX``, ``DELETED_SUFFIX``) or "" (Kafka's ``LogFileUtils.logFile`` /
    ``offsetIndexFile`` / ``timeIndexFile``). Every segment file name is built here."""
    base = directory if isinstance(directory, Path) else Path(directory)
    return base / f"{filename_prefix(offset)}{kind}{suffix}"


def segment_files(directory: Path | str, offset: int, suffix: str = "") -> list[Path]:
    """The ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` of segment ``offset``
    in one state (the ``.txnindex`` may not exist)."""
    return [segment_file(directory, offset, kind, suffix) for kind in SEGMENT_FILE_TYPES]


def log_file_offset(name: str) -> int | None:
    """The base offset if ``name`` is a live segment's ``.log`` (digits + ``.log``), else
    None: suffixed files (``.log.swap``...) and strangers are not segments."""
    stem, _dot, ext = name.partition(".")
    return int(stem) if "." + ext == LOG_SUFFIX and stem.isdigit() else None
