"""The one parser of a vLLM version string, below every layer of :mod:`analysis` so each can ask it.

``0.6.3.post1``, ``0.11.0rc2`` and ``v0.14.0`` are the releases 0.6.3, 0.11.0 and 0.14.0. :func:`parse_release`
refuses what is not a version number by name; :func:`known_release` is for a record's version that may be absent
or unreadable (None). :func:`analysis.vllm.release.release` adds the default (the vLLM kvprof pins); what each
release does is :mod:`analysis.vllm.release`'s.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


class UnknownVLLMVersion(ValueError):
    """A --vllm-version that is not a version number."""


def parse_release(text: str) -> Version:
    """The release ``text`` names (its base version: no pre-, post- or dev-release part)."""
    try:
        v = Version(text.lstrip("v"))
    except InvalidVersion:
        raise UnknownVLLMVersion(f"vllm_version {text!r} is not a version number (e.g. 0.32.0, 0.10.1)") from None
    return Version(v.base_version)


def known_release(version: str | None) -> Version | None:
    """The release a record's version names, or None where it names none or is not a version number."""
    if not version:
        return None
    try:
        return parse_release(version)
    except UnknownVLLMVersion:
        return None
