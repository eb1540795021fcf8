"""errno numbers as names, the one place futextrace turns them into words:
-22 -> "-EINVAL" (a kernel return value), 16 -> "EBUSY", and the errno behind
a message that ends in strerror() text (BCC's exceptions)."""
from __future__ import annotations

import errno
import os

# BCC turns EPERM into this text instead of strerror's.
_BCC_MESSAGES = {"Need super-user privileges to run": "EPERM"}
_BY_TEXT = {os.strerror(e): errno.errorcode[e] for e in errno.errorcode}


def errno_name(ret) -> str:
    """A kernel return value: "-EINVAL" for -22, the number itself if not negative."""
    if ret is None:
        return "unknown"
    if ret >= 0:
        return str(ret)
    return "-" + name(-ret)


def name(code: int) -> str:
    """"EINVAL" for 22; the number as text when it has no name."""
    return errno.errorcode.get(code, str(code))


def name_in_message(message: str) -> str:
    """The errno name a message ends with (strerror text, or BCC's own wording), or ""."""
    for text, errname in _BCC_MESSAGES.items():
        if text in message:
            return errname
    for text, errname in _BY_TEXT.items():
        if message.endswith(text):
            return errname
    return ""
