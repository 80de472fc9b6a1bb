"""The one error users see for bad input: a ``ValueError`` that names the field and the value."""


class InputError(ValueError):
    """Bad user input (a flag, a config field, a trace line). The CLI prints it and exits 2."""

    def __init__(self, field: str, value, reason: str):
        self.field, self.value, self.reason = field, value, reason
        super().__init__(f"{field}={value!r}: {reason}")


def require(condition: bool, field: str, value, reason: str) -> None:
    if not condition:
        raise InputError(field, value, reason)
