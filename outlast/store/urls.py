"""A database or Redis URL as messages may show it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def redact(url: str) -> str:
    """The URL without its password (after the user, or a ``password=`` parameter), for messages;
    never raises, even on a malformed URL."""
    url = re.sub(r"(?i)\b((?:sentinel_)?password=)[^&\s]*", r"\1***", url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. an unclosed IPv6 bracket: hide whatever sits between user and host
        return re.sub(r"(//[^/@:]*:)[^/]*@", r"\1***@", url)
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))
