"""Fetch the evaluation data (SentEval layout) for users with internet access.

The canonical source is SimCSE's SentEval tarball, the one its `download_dataset.sh` fetches. Its
STS12-16 and STS-B inputs are the files SentEval's own download script produces, i.e.
**Moses-tokenized and lower-cased** (e.g. `it 's` rather than `It's`). The raw originals used for
development (see `shared/data/README.md`) differ in that tokenisation and case; for uncased BERT
the difference in scores is small, for a cased model (RoBERTa) it is not, and numbers computed on
the two are not byte-for-byte comparable. `dclr eval --sts-text senteval`
(`dclr.data.senteval_text`) gives raw files SentEval's form; users who want the raw files lay them
out by hand and pass `--data-dir`.

The result is laid out as `resolve_data_dir` and the readers in `dclr.data.sts` expect:
`<data_dir>/senteval/STS/STS12-en-test/STS.input.MSRpar.txt`, ...,
`<data_dir>/senteval/STS/STSBenchmark/sts-{train,dev,test}.csv`,
`<data_dir>/senteval/SICK/SICK_{train,trial,test_annotated}.txt`, plus SentEval's transfer-task
folders (MR, CR, ...) when the archive has them.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import posixpath
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from dclr.data.paths import ENV_VAR as DATA_DIR_ENV_VAR
from dclr.data.paths import resolve_data_dir
from dclr.data.sts import _SICK_FILES, _STSB_FILES, STS_SUBSETS, load_task
from dclr.errors import ConfigError, InputError
from dclr.progress import progress_bar

# Where each archive comes from. Only "senteval" exists today; a dict so a mirror can replace it.
SOURCES: dict[str, str] = {
    "senteval": "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar",
}
# The sha256 pinned for each archive URL: a download from a pinned URL must match it. The upstream
# file carries no published checksum and this code was written offline, so the default URL's pin
# is still EMPTY: UNVERIFIED. Fill it once from a trusted network (`sha256sum senteval.tar`, or the
# digest `dclr data download` prints and records in senteval/SOURCE.json) and commit it; until
# then the download is checked by reading every STS task in full, and a user can pin the digest
# with --sha256 or $DCLR_DATA_SHA256.
SHA256_BY_URL: dict[str, str] = {
    SOURCES["senteval"]: "",  # UNVERIFIED: to be filled (see above)
}
# Kept for callers of the old name: source name -> pinned sha256 (the default URL's pin).
SHA256: dict[str, str] = {name: SHA256_BY_URL.get(url, "") for name, url in SOURCES.items()}
# Overrides SOURCES["senteval"] (a mirror, or file:///path/to/senteval.tar for a manual download).
URL_ENV_VAR = "DCLR_DATA_URL"
# Expected sha256 of the archive, whatever its URL (overrides the pin).
SHA256_ENV_VAR = "DCLR_DATA_SHA256"
# Written into senteval/ after a download: the URL, its sha256 and size (to pin or compare later).
SOURCE_RECORD = "SOURCE.json"
# Caps that stop a wrong URL or a hostile archive from filling the disk. SentEval's tarball is a few
# hundred MB with a few thousand files; ten times that is still refused at once.
MAX_DOWNLOAD_BYTES = 2 * 1024**3
MAX_EXTRACTED_BYTES = 4 * 1024**3
MAX_MEMBERS = 100_000

# SentEval's task folders that are laid out when the archive has them; STS and SICK are required.
REQUIRED_FOLDERS = ("STS", "SICK")
OPTIONAL_FOLDERS = ("MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "SNLI")

_CHUNK_BYTES = 1 << 20  # read/hash/write 1 MiB at a time: few syscalls, bounded memory
_TIMEOUT_S = 60.0  # per socket operation, not the whole download


def required_files(root: Path) -> list[Path]:
    """Every file the STS readers open under `root/senteval` (STS12-16, STS-B and SICK)."""
    sts = root / "senteval" / "STS"
    files = [
        sts / f"{task}-en-test" / f"STS.{kind}.{subset}.txt"
        for task, subsets in STS_SUBSETS.items()
        for subset in subsets
        for kind in ("input", "gs")
    ]
    files += [sts / "STSBenchmark" / name for name in _STSB_FILES.values()]
    files += [root / "senteval" / "SICK" / name for name in _SICK_FILES.values()]
    return files


def source_urls(base_urls: Mapping[str, str] | None = None) -> dict[str, str]:
    """SOURCES, overridden by $DCLR_DATA_URL (for "senteval"), then by `base_urls`."""
    urls = dict(SOURCES)
    if os.environ.get(URL_ENV_VAR):
        urls["senteval"] = os.environ[URL_ENV_VAR]
    for name, url in (base_urls or {}).items():
        if name not in SOURCES:
            raise ConfigError(f"unknown data source {name!r}; known: {', '.join(SOURCES)}")
        urls[name] = url
    return urls


def download_data(
    data_dir: str | Path,
    *,
    base_urls: Mapping[str, str] | None = None,
    sha256: str | None = None,
    force: bool = False,
    show_progress: bool = True,
    timeout: float = _TIMEOUT_S,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
    max_extracted_bytes: int = MAX_EXTRACTED_BYTES,
) -> Path:
    """Download SentEval's evaluation data and lay it out under `data_dir/senteval/`.

    Args:
        data_dir: the data root; `senteval/` is created inside it (parents too).
        base_urls: full archive URLs by source name (only "senteval"), replacing `SOURCES` and
            $DCLR_DATA_URL. Any scheme urllib opens works, including `file://`.
        sha256: expected hex digest of the archive, checked before extraction. Default:
            $DCLR_DATA_SHA256, else the digest pinned for the URL in `SHA256_BY_URL` (the default
            URL's pin is still empty: see there). The digest of every download is printed and
            recorded in `senteval/SOURCE.json`.
        force: replace an existing `senteval/` folder. Without it, a complete one is kept
            untouched (no network access) and an incomplete one is an error, so that nothing
            the user put there is deleted silently.
        show_progress: show a tqdm bar while downloading.
        timeout: seconds each network operation may block.
        max_bytes: a longer download is stopped and refused.
        max_extracted_bytes: an archive whose files add up to more (or that has more than
            `MAX_MEMBERS` members) is refused before anything is extracted.

    Returns:
        `data_dir`, checked by `resolve_data_dir` and by reading the STS-B test set. A fresh
        download has every STS task read in full before it is moved into place.

    The archive is streamed to a temporary folder inside `data_dir`, extracted there (members with
    absolute paths, `..`, links leaving the archive or special files are rejected), the folder
    holding `STS/` and `SICK/` is found wherever it sits, and SentEval's task folders are moved to
    a new `senteval/`, which is read in full and only then renamed into place. An interrupted or
    failed download leaves an existing `senteval/` untouched and removes its temporary folder.
    """
    data_dir = Path(data_dir).expanduser()
    if data_dir.name == "senteval" and (data_dir / "STS").is_dir():
        data_dir = data_dir.parent  # given the senteval/ folder itself, as resolve_data_dir allows
    target = data_dir / "senteval"
    if target.exists() and not force:
        missing = [p for p in required_files(data_dir) if not p.is_file()]
        if not missing:
            return _validated(data_dir)
        raise InputError(
            f"{target} exists but lacks {len(missing)} required files (first: "
            f"{missing[0].relative_to(data_dir)})",
            path=target,
            fix="pass --force to replace that folder with a fresh download, or choose another "
            "--data-dir",
        )

    url = source_urls(base_urls)["senteval"]
    expected = sha256 or os.environ.get(SHA256_ENV_VAR) or SHA256_BY_URL.get(url)
    data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".dclr-download-", dir=data_dir))
    try:
        archive = work / "senteval.tar"
        digest = _fetch(
            url, archive, show_progress=show_progress, timeout=timeout, max_bytes=max_bytes
        )
        if expected and digest != expected.lower():
            raise InputError(
                f"sha256 of the download is {digest}, expected {expected}",
                path=url,
                fix="the file is corrupt or has changed upstream; retry, or check the checksum",
            )
        if not expected and show_progress:
            print(f"sha256 {digest} (no checksum pinned for {url}: not verified)", flush=True)
        record = {"url": url, "sha256": digest, "bytes": archive.stat().st_size}
        extracted = work / "extracted"
        _extract(archive, extracted, url, max_extracted_bytes)
        archive.unlink()
        staged = work / "root"
        _stage(_find_senteval_root(extracted, url), staged / "senteval")
        (staged / "senteval" / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        _read_all_tasks(staged)  # a broken archive fails here, before anything is replaced
        _swap_in(staged / "senteval", target, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _validated(data_dir)


def _network_error(url: str, reason: object) -> InputError:
    return InputError(
        f"download failed: {reason}",
        path=url,
        fix=(
            "check the internet connection (and $HTTPS_PROXY if you are behind a proxy); or "
            "fetch the file another way and lay it out with "
            f"`{URL_ENV_VAR}=file:///path/to/senteval.tar dclr data download --data-dir DIR`; "
            f"or pass --data-dir / ${DATA_DIR_ENV_VAR} pointing at a folder that already holds "
            "senteval/STS and senteval/SICK"
        ),
    )


def _fetch(
    url: str,
    dest: Path,
    *,
    show_progress: bool,
    timeout: float,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
) -> str:
    """Stream `url` to `dest` (at most `max_bytes`); return the sha256 hex digest written."""
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, dest.open("wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if total is not None and total > max_bytes:
                raise _too_big(url, f"announces {total} bytes", max_bytes)
            with progress_bar(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=posixpath.basename(url) or "download",
                enabled=show_progress,
            ) as bar:
                while chunk := response.read(_CHUNK_BYTES):
                    received += len(chunk)
                    if received > max_bytes:
                        raise _too_big(url, f"sent more than {max_bytes} bytes", max_bytes)
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as err:
        raise _network_error(url, f"HTTP {err.code} {err.reason}") from None
    except urllib.error.URLError as err:
        raise _network_error(url, err.reason) from None
    except (TimeoutError, ConnectionError, http.client.HTTPException) as err:
        raise _network_error(url, f"{type(err).__name__}: {err}") from None
    except ValueError as err:  # urlopen's "unknown url type" and malformed URLs
        raise InputError(
            f"cannot open this URL: {err}",
            path=url,
            fix=f"give a full URL (https://..., file:///...) in ${URL_ENV_VAR} or base_urls",
        ) from None
    if total is not None and received != total:
        raise _network_error(url, f"connection closed after {received} of {total} bytes")
    return digest.hexdigest()


def _too_big(url: str, what: str, limit: int) -> InputError:
    return InputError(
        f"the download {what}; the limit is {limit} bytes",
        path=url,
        fix="check the URL: SentEval's tarball is a few hundred MB",
    )


def _unsafe_reason(member: tarfile.TarInfo, *, links_allowed: bool) -> str | None:
    """Why extracting `member` could write outside the destination, or None if it cannot."""
    name = member.name
    if posixpath.isabs(name) or name.startswith("\\"):
        return "an absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "a path with '..'"
    if member.issym() or member.islnk():
        if not links_allowed:
            return "a link, and this Python's tarfile lacks the 'data' filter"
        target = member.linkname
        if member.issym():
            target = posixpath.join(posixpath.dirname(name), target)
        target = posixpath.normpath(target)
        if posixpath.isabs(member.linkname) or target == ".." or target.startswith("../"):
            return f"a link to {member.linkname!r}, outside the archive"
        return None
    if not (member.isfile() or member.isdir()):
        return "a special file (device or FIFO)"
    return None


def _extract(archive: Path, dest: Path, url: str, max_bytes: int = MAX_EXTRACTED_BYTES) -> None:
    """Extract `archive` into `dest`, refusing the whole archive if any member is unsafe or the
    files add up to more than `max_bytes` (a compressed archive can expand a thousandfold)."""
    has_data_filter = hasattr(tarfile, "data_filter")  # Python >= 3.11.4
    try:
        with tarfile.open(archive) as tar:
            members = []
            total = 0
            for member in tar:  # headers only; stops early on a bomb
                members.append(member)
                total += member.size if member.isfile() else 0
                if total > max_bytes or len(members) > MAX_MEMBERS:
                    raise InputError(
                        f"refusing to extract the archive: its files add up to more than "
                        f"{max_bytes} bytes or {MAX_MEMBERS} members",
                        path=url,
                        fix="the archive is not the expected SentEval tarball; check the URL",
                    )
            for member in members:
                reason = _unsafe_reason(member, links_allowed=has_data_filter)
                if reason:
                    raise InputError(
                        f"refusing to extract the archive: member {member.name!r}: {reason}",
                        path=url,
                        fix="the archive is not the expected SentEval tarball; check the URL",
                    )
            dest.mkdir()
            if has_data_filter:
                # Second line of defence: also resolves links through earlier links.
                tar.extractall(dest, members=members, filter="data")
            else:
                tar.extractall(dest, members=members)
    except tarfile.FilterError as err:
        raise InputError(
            f"refusing to extract the archive: {err}",
            path=url,
            fix="the archive is not the expected SentEval tarball; check the URL",
        ) from None
    except tarfile.TarError as err:
        raise InputError(
            f"not a readable tar archive: {err}",
            path=url,
            fix="retry the download; if it persists, the URL does not point at senteval.tar",
        ) from None


def _find_senteval_root(extracted: Path, url: str) -> Path:
    """The shallowest folder holding both STS/ and SICK/ (e.g. `data/downstream/`)."""
    candidates = [
        sts.parent
        for sts in extracted.rglob("STS")
        if sts.is_dir() and all((sts.parent / name).is_dir() for name in REQUIRED_FOLDERS)
    ]
    if not candidates:
        raise InputError(
            "the archive holds no folder with both STS/ and SICK/",
            path=url,
            fix="point the URL at SentEval's data tarball (senteval.tar from SimCSE)",
        )
    return min(candidates, key=lambda p: (len(p.parts), str(p)))


def _stage(source: Path, staged: Path) -> None:
    """Move SentEval's task folders from `source` into `staged` (same filesystem: renames)."""
    staged.mkdir(parents=True)
    for name in (*REQUIRED_FOLDERS, *OPTIONAL_FOLDERS):
        if (source / name).is_dir():
            shutil.move(source / name, staged / name)


def _read_all_tasks(root: Path) -> None:
    """Read every STS task and split under `root`; raises InputError naming a missing file."""
    for task in STS_SUBSETS:
        load_task(root, task, "test")
    for task in ("STSBenchmark", "SICKRelatedness"):
        for split in ("train", "dev", "test"):
            load_task(root, task, split)


def _swap_in(staged: Path, target: Path, work: Path) -> None:
    """Rename `staged` to `target`, moving an existing `target` aside first and back on failure."""
    old = work / "senteval.old"
    if target.exists():
        target.rename(old)
    try:
        staged.rename(target)
    except OSError:
        if old.exists():
            old.rename(target)
        raise


def _validated(data_dir: Path) -> Path:
    root = resolve_data_dir(data_dir)
    load_task(root, "STSBenchmark", "test")
    return root
