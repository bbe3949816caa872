"""Store path segments from ids: reversible, collision-free, and never outside the store root.

ADK ids (app, user, session, agent) are arbitrary strings: `alice@x.com`, `..`, `a/b`, an empty
string or a 10 KB token. A segment must name exactly one id, so ids are escaped rather than
cleaned: lower-case letters, digits, `-` and `_` stay as they are, every other character
(upper case included, so two ids never share a folder on a case-insensitive file system) becomes
`=` and its UTF-8 bytes in hex (`@` is `=40`, `A` is `=41`). A leading `.` is escaped too, so no
segment is `.`, `..` or a hidden file, and the empty id is `=`. An id whose escaped form would
exceed `MAX_SEGMENT` characters keeps a readable prefix and ends in `~` and a 32-hex digest of the
whole id: still unique, no longer reversible (`decode_segment` returns None for it).
"""

from __future__ import annotations

import hashlib

__all__ = ["encode_segment", "decode_segment", "MAX_SEGMENT"]

MAX_SEGMENT = 120  # well below the 255-byte name limit of common file systems, with room for temp names
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_EMPTY = "="


def _escape(ch: str) -> str:
    return "".join(f"={b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def encode_segment(value: str) -> str:
    """The path segment of one id (see the module docstring for the rules)."""
    if not isinstance(value, str):
        value = str(value)
    if value == "":
        return _EMPTY
    pieces = [ch if ch in _PLAIN or (ch == "." and i > 0) else _escape(ch) for i, ch in enumerate(value)]
    encoded = "".join(pieces)
    if len(encoded) <= MAX_SEGMENT:
        return encoded
    head, room = [], MAX_SEGMENT - 33  # whole escapes only: a prefix never ends inside one
    for piece in pieces:
        if len(piece) > room:
            break
        head.append(piece)
        room -= len(piece)
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return "".join(head) + "~" + digest


def decode_segment(segment: str) -> str | None:
    """The id a segment names; None for a hashed (over-long) segment, which cannot be reversed."""
    if segment == _EMPTY:
        return ""
    if "~" in segment:
        return None
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "=":
            out += bytes.fromhex(segment[i + 1:i + 3])
            i += 3
        else:
            out += segment[i].encode("ascii")
            i += 1
    return out.decode("utf-8", "surrogatepass")
