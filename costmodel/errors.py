"""The one error users see for bad input: a ``ValueError`` that names the field and the value."""

from typing import Any


class InputError(ValueError):
    """Bad user input (a flag, a config field, a trace line). The CLI prints it and exits 2."""

    def __init__(self, field: str, value, reason: str):
        self.field, self.value, self.reason = field, value, reason
        super().__init__(f"{field}={value!r}: {reason}")


def require(condition: bool, field: str, value, reason: str) -> None:
    if not condition:
        raise InputError(field, value, reason)


def json_object(where: str, text) -> Any:
    """An engine flag's JSON value (vLLM's --speculative-config, --kv-transfer-config) as a dict;
    None when empty; InputError naming the flag when it is not a JSON object. Typed as json.loads
    is: the callers check each field themselves."""
    import json

    if text is None or not str(text).strip():
        return None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(where, text, f"must be a JSON object, as vLLM parses it ({e.msg})") from None
    require(isinstance(d, dict), where, text, "must be a JSON object")
    return d
