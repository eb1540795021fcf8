"""-errno values as names (-22 -> "-EINVAL")."""
import errno


def errno_name(ret) -> str:
    if ret is None:
        return "unknown"
    if ret >= 0:
        return str(ret)
    return "-" + errno.errorcode.get(-ret, str(-ret))
